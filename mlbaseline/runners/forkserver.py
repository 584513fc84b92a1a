"""A fork server for `repeats` replicates (`throughput.replicate_start: fork`): one zygote
process (runners.zygote), started once per `run_replicates`, imports torch, torchvision and
mlbaseline's CLI, then forks one child per replicate that runs the same `python -m mlbaseline
throughput -c CFG --json --quiet` a fresh process would, everything after the imports its own.
A replicate then costs its measurement, not the ~5 s of imports: more replicates fit the budget.

`ForkServer.run(cmd)` gives the same `ChildRun` as `children.run_child(cmd)`, Ctrl-C included:
the child got the terminal's SIGINT too (the zygote ignores it), has 5 s to write its partial
result, then gets SIGINT, then SIGKILL. The zygote reads its requests from a pipe whose only
writer is this process: when this process exits, however (stop, Ctrl-C, SIGTERM, SIGKILL),
the zygote sees EOF, ends a running child and exits; nothing is left behind.

Fresh processes stay where a fork cannot stand in (`start_method`), and in `mlb ab
--processes`, whose arms may be another interpreter or checkout.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from mlbaseline import scratch
from mlbaseline.errors import MlbError
from mlbaseline.runners.children import CHILD_PREFIX, ChildRun, child_run
from mlbaseline.runners.zygote import Lines
from mlbaseline.safewrite import open_stream
from mlbaseline.stopping import Terminated

ZYGOTE = "mlbaseline.runners.zygote"
PRELOAD = ("torch", "torchvision", "mlbaseline.cli")
READY_TIMEOUT_S = 600.0  # the imports on a loaded machine; a fresh child has no limit either


class ZygoteGone(RuntimeError):
    """The zygote exited or never became ready; the message says why (its log's last line)."""


def start_method(throughput: Any, under_torchrun: bool = False) -> tuple[str, str | None]:
    """("fork" | "fresh", why fresh was forced where fork was asked, else None), from a
    ThroughputConfig."""
    if getattr(throughput, "replicate_start", "fresh") != "fork":
        return "fresh", None
    if not hasattr(os, "fork"):
        return "fresh", "no os.fork on this platform"
    if sys.platform == "darwin":  # why Python's multiprocessing spawns there
        return "fresh", "macOS system libraries are not fork-safe"
    if under_torchrun:
        return "fresh", "under torchrun every rank is one process of a single run"
    if throughput.nproc > 1:
        return "fresh", f"nproc {throughput.nproc}: each replicate launches its own ranks"
    return "fork", None


class ForkServer:
    """One zygote; `run(cmd)` per replicate; `stop()` (or the `with` block's end) ends it."""

    def __init__(self, preload: Sequence[str] = PRELOAD, prefix: Sequence[str] = CHILD_PREFIX):
        self.prefix = tuple(prefix)
        self.info: dict[str, Any] | None = None  # the zygote's ready message
        self._dir = scratch.make("forkserver")
        self._n = 0
        self._gone: str | None = None
        try:
            with open_stream(self._dir / "zygote.log", mode="wb") as log:
                self._proc = subprocess.Popen(
                    [self.prefix[0], "-m", ZYGOTE, str(self._dir), *preload],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                )
        except (OSError, MlbError):
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        assert self._proc.stdout is not None
        self._lines = Lines(self._proc.stdout.fileno())
        atexit.register(self.stop)  # an error path that skips stop() still ends the zygote

    @property
    def pid(self) -> int:
        return self._proc.pid

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def ready(self, timeout: float = READY_TIMEOUT_S) -> dict[str, Any]:
        """Wait for the zygote's imports; its ready message. ZygoteGone if it exited or the
        imports broke what a fork needs (CUDA initialised)."""
        if self.info is None:
            message = self._next(timeout)
            if message is None or not message.get("ready"):
                raise self._lost(f"not ready after {timeout:.0f} s")
            if message.get("cuda_initialized"):
                self.stop()
                raise ZygoteGone("the zygote's imports initialised CUDA: forks cannot use it")
            self.info = message
        return self.info

    def run(self, cmd: Sequence[str]) -> ChildRun:
        """Run `cmd` (this interpreter's `python -m MODULE ARGS…`) as a forked child; its
        crash is a ChildRun with the error, as from a fresh process. ZygoteGone when the
        zygote itself is (then no later run can use it)."""
        if len(cmd) < 3 or cmd[0] != self.prefix[0] or cmd[1] != "-m":
            raise ValueError(f"the fork server runs only `{self.prefix[0]} -m MODULE …`: {cmd}")
        self.ready()
        out, err = self._dir / f"{self._n}.out", self._dir / f"{self._n}.err"
        self._n += 1
        self._send(
            op="run", module=cmd[2], argv=list(cmd[3:]), stdout=str(out), stderr=str(err),
            cwd=os.getcwd(),
        )  # fmt: skip
        code, interrupted = self._returncode()
        return child_run(_take(out), _take(err), code, interrupted)

    def _returncode(self) -> tuple[int, bool]:
        """The child's exit code, and whether Ctrl-C came meanwhile (as run_child handles it)."""
        try:
            return self._done(None), False
        except KeyboardInterrupt as exc:
            if isinstance(exc, Terminated):  # only this process got it: the child gets it now
                self._send(op="signal", signal=exc.signum)
        for timeout, then in ((5.0, signal.SIGINT), (60.0, signal.SIGKILL)):
            code = self._done(timeout)
            if code is not None:
                return code, True
            self._send(op="signal", signal=int(then))
        code = self._done(None)
        assert code is not None
        return code, True

    def _done(self, timeout: float | None) -> int | None:
        """The running child's exit code; None when `timeout` passed first."""
        while True:
            message = self._next(timeout)
            if message is None:
                if self._lines.eof:
                    raise self._lost("exited while a replicate ran")
                return None
            if "done" in message:
                return int(message["returncode"])

    def _next(self, timeout: float | None) -> dict[str, Any] | None:
        if self._gone is not None:
            raise ZygoteGone(self._gone)
        return self._lines.next(timeout)

    def _send(self, **message: Any) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write((json.dumps(message) + "\n").encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise self._lost("exited") from None

    def _lost(self, what: str) -> ZygoteGone:
        log = self._dir / "zygote.log"
        lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
        self._gone = f"zygote {what}" + (f": {lines[-1]}" if lines else "")
        return ZygoteGone(self._gone)

    def stop(self) -> None:
        """End the zygote (EOF on its stdin: it ends a running child too); idempotent."""
        atexit.unregister(self.stop)
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._gone = self._gone or "zygote stopped"
        shutil.rmtree(self._dir, ignore_errors=True)


Launch = Callable[[Sequence[str]], ChildRun]


@contextlib.contextmanager
def launcher(
    throughput: Any, fresh: Launch, under_torchrun: bool = False
) -> Iterator[tuple[Launch, dict[str, Any]]]:
    """(how to run one replicate's command, the record of how replicates started) for one
    `run_replicates`: forked from a zygote started here, or `fresh` where `start_method` says
    so; a zygote that is lost (it exited, its imports broke a fork) is recorded and the rest
    run `fresh`. The zygote ends with the block."""
    how, why = start_method(throughput, under_torchrun)
    record: dict[str, Any] = {
        "asked": getattr(throughput, "replicate_start", "fresh"),
        "start": how,
        "reason": why,
    }
    server = None
    if how == "fork":
        try:
            server = ForkServer()
        except OSError as exc:
            record.update(start="fresh", reason=f"could not start the zygote: {exc}")
    if server is None:
        yield fresh, record
        return
    with server as zygote:

        def launch(cmd: Sequence[str]) -> ChildRun:
            if record["start"] == "fork":
                try:
                    run = zygote.run(cmd)
                    record["zygote_import_s"] = (zygote.info or {}).get("import_s")
                    return run
                except ZygoteGone as exc:
                    record.update(start="fresh", reason=f"{exc}; fresh processes from here")
            return fresh(cmd)

        yield launch, record


def _take(path: Path) -> str:
    """A child's captured output, then the file is gone."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:  # the child died before opening it
        return ""
    finally:
        path.unlink(missing_ok=True)


__all__ = ["PRELOAD", "ForkServer", "Launch", "ZygoteGone", "launcher", "start_method"]
