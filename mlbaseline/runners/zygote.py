"""The fork server's zygote (runners.forkserver starts it): `python -m mlbaseline.runners.zygote
WORKDIR MODULE...` imports the MODULEs once (torch, torchvision, mlbaseline's CLI), then forks
one child per request, which runs `python -m REQUEST_MODULE ARGV...` (runpy, as `-m` does) with
its stdout and stderr in the request's files, and reports the child's exit code.

Protocol, one JSON object per line: the parent writes requests on the zygote's stdin
(`{"op": "run", "module", "argv", "stdout", "stderr", "cwd"}`, and while a child runs
`{"op": "signal", "signal": N}`); the zygote answers on its stdout (`{"ready": …}` once the
imports are done, `{"pid": P}` when a child starts, `{"done": P, "returncode": RC}` when it
ends; RC < 0: killed by signal -RC, as subprocess says it). EOF on stdin (the parent stopped it
or died, SIGKILL included) ends the zygote, and the running child with it; the zygote then
removes WORKDIR (the parent's folder for the children's output and the zygote's log), which a
parent killed outright cannot.

Nothing here may run a torch op or start a thread pool: a fork copies only the forking thread,
and a pool started before it (torch's OpenMP intra-op pool) is broken in the child. Everything a
run does after the imports (seeds, threads, the model, the data) happens in the child. What a
fork cannot give a child, unlike a fresh interpreter: its own address-space layout (ASLR) and
its own str hash seed; bench `replicates` checks by A/A that forked replicates still differ as
much as fresh ones. Standard library only: this module must not import what it preloads.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import select
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any


class Lines:
    """JSON messages, one a line, from a pipe (both ends of the protocol read with it)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""
        self.eof = False

    def _fill(self) -> None:
        chunk = os.read(self.fd, 1 << 16)
        self.eof = not chunk
        self.buf += chunk

    def ready(self) -> list[dict[str, Any]]:
        """Every whole line there is, after one read if the pipe has data (never blocks)."""
        if not self.eof and select.select([self.fd], [], [], 0)[0]:
            self._fill()
        *lines, self.buf = self.buf.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def next(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next message, waiting at most `timeout` s (None: for ever); None on timeout or
        at EOF (then `eof` is set)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            line, sep, rest = self.buf.partition(b"\n")
            if sep:
                self.buf = rest
                if line.strip():
                    return json.loads(line)
                continue
            if self.eof:
                return None
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.fd], [], [], left)[0]:
                return None
            self._fill()


def _send(fd: int, message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def _preload(names: list[str]) -> dict[str, Any]:
    """Import each module; one that fails is left for the child to import (and fail on) as a
    fresh interpreter would, so the zygote never changes what a run does."""
    start = time.perf_counter()
    loaded, skipped = [], {}
    for name in names:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except Exception as exc:  # any import error is the child's to report, as fresh
            skipped[name] = f"{type(exc).__name__}: {exc}"
    torch = sys.modules.get("torch")
    cuda = bool(torch is not None and torch.cuda.is_initialized())
    return {
        "loaded": loaded,
        "skipped": skipped,
        "import_s": time.perf_counter() - start,
        "cuda_initialized": cuda,  # would break CUDA in every child: the parent refuses it
        "threads": _os_threads(),
    }


def _os_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return -1


def _kill(pid: int) -> None:
    """End an unreaped child: SIGTERM, a moment to go, then SIGKILL; reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def _wait(pid: int, lines: Lines) -> int | None:
    """The child's exit code (subprocess's convention), passing signals on while it runs;
    None when the parent went away (EOF), after ending the child."""
    pidfd = None
    with contextlib.suppress(AttributeError, OSError):  # Linux ≥ 5.3; elsewhere: poll
        pidfd = os.pidfd_open(pid)
    reaped = False
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                reaped = True
                return os.waitstatus_to_exitcode(status)
            for message in lines.ready():
                if message.get("op") == "signal":
                    os.kill(pid, int(message["signal"]))
            if lines.eof:
                return None
            fds = [lines.fd] if pidfd is None else [lines.fd, pidfd]
            select.select(fds, [], [], 0.05 if pidfd is None else None)
    finally:  # EOF, SIGTERM or a bug: never leave the child behind
        if not reaped:
            _kill(pid)
        if pidfd is not None:
            os.close(pidfd)


def serve(lines: Lines, out_fd: int) -> dict[str, Any] | None:
    """Fork a child per request until EOF. Returns None in the zygote (time to exit) and the
    request in a forked child (which then becomes it)."""
    while True:
        request = lines.next()
        if request is None or request.get("op") != "run":
            return None
        sys.stdout.flush()
        sys.stderr.flush()  # nothing buffered here may reach the child's files
        pid = os.fork()
        if pid == 0:
            return request
        _send(out_fd, {"pid": pid})
        code = _wait(pid, lines)
        if code is None:
            return None
        _send(out_fd, {"done": pid, "returncode": code})


def _redirect(path: str, fd: int) -> None:
    # the one writer, imported only here, in the forked child after the preloads
    from mlbaseline.safewrite import create_new

    target = create_new(Path(path), force=True)
    os.dup2(target, fd)
    os.close(target)


def become(request: dict[str, Any], protocol_fds: tuple[int, int]) -> None:
    """In the forked child: what a fresh `python -m MODULE ARGV` would be, minus the imports.
    Ends as that program does (SystemExit and the interpreter's own exit: atexit, flush)."""
    for fd in protocol_fds:
        os.close(fd)
    _redirect(request["stdout"], 1)
    _redirect(request["stderr"], 2)
    # the zygote ignores Ctrl-C (the parent decides); a fresh interpreter raises
    # KeyboardInterrupt, which lets the run write its partial result
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if request.get("cwd"):
        os.chdir(request["cwd"])
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # `random` reseeds itself after a fork; NumPy's global state not
        numpy.random.seed()
    sys.argv = ["", *request["argv"]]
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


def _terminate(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through _wait's finally: the child goes too


def main(workdir: str, preload: list[str]) -> None:
    # the protocol pipes move off fds 0/1, so that a stray print while importing cannot
    # corrupt the protocol: fd 1 then writes to the zygote's log (fd 2), fd 0 reads nothing
    in_fd, out_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches the group
    signal.signal(signal.SIGTERM, _terminate)
    _send(out_fd, {"ready": True, "pid": os.getpid(), **_preload(preload)})
    request = serve(Lines(in_fd), out_fd)
    if request is None:  # the zygote ends
        shutil.rmtree(workdir, ignore_errors=True)
    else:  # a forked child
        become(request, (in_fd, out_fd))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
