"""The fork server behind `throughput.replicate_start: fork`: a forked replicate gives what a
fresh process gives, a crash is a ChildRun with the error and the server goes on, nothing is
left behind (stop, SIGTERM, Ctrl-C), and the places where fresh processes stay."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from mlbaseline.config import resolve
from mlbaseline.runners import forkserver
from mlbaseline.runners.children import ChildRun, child_command, run_child, write_child_config
from mlbaseline.runners.forkserver import ForkServer, launcher, start_method

ROOT = Path(__file__).resolve().parents[1]
TINY = {
    "workload.model": "builtin:tiny_cnn",
    "workload.image_size": 16,
    "workload.device": "cpu",
    "workload.threads": 1,
    "golden.subset_size": 32,
    "throughput.mode": "train",
    "throughput.batch_sizes": [4],
    "throughput.min_time_s": 0.0,
    "throughput.min_steps": 6,
    "throughput.max_steps": 6,
    "throughput.window": 4,
    "throughput.warmup_min": 1,
    "throughput.warmup_max": 2,
    "throughput.telemetry": False,
}


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    with ForkServer() as s:  # one zygote (torch imported once) for the tests that share it
        yield s


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_forked_replicate_gives_what_a_fresh_process_gives(server, tmp_path) -> None:
    command = child_command(write_child_config(resolve(None, "demo", TINY), tmp_path))
    forked, fresh = server.run(command), run_child(command)
    assert server.ready()["loaded"] == ["torch", "torchvision", "mlbaseline.cli"]
    assert not server.ready()["cuda_initialized"]
    for run in (forked, fresh):
        assert run.returncode == 0 and not run.interrupted and run.result is not None
        assert run.result.status == "complete", run.result.notes
    a, b = forked.result, fresh.result
    assert a is not None and b is not None
    assert a.config == b.config and a.environment == b.environment
    assert set(a.measurements) == set(b.measurements) and set(a.data) == set(b.data)
    assert a.data["torch_threads"] == b.data["torch_threads"] == 1  # set in the child


def test_a_crashing_child_is_a_child_run_with_the_error_and_the_server_goes_on(
    server, tmp_path
) -> None:
    crash = tmp_path / "crashing.py"
    crash.write_text(
        "import os, signal\n\ndef model(**_):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    over = {**TINY, "workload.model": "crashing:model", "workload.import_paths": [str(tmp_path)]}
    crashed = server.run(child_command(write_child_config(resolve(None, "demo", over), tmp_path)))
    assert crashed == ChildRun(None, "exit code -9", -9, False)
    missing = server.run([sys.executable, "-m", "no_such_module_here"])
    assert missing.returncode == 1 and "No module named no_such_module_here" in missing.error
    ok = server.run(child_command(write_child_config(resolve(None, "demo", TINY), tmp_path)))
    assert ok.returncode == 0 and ok.result is not None  # the zygote went on


def test_stop_leaves_no_process_behind() -> None:
    server = ForkServer(preload=())
    assert server.ready()["pid"] == server.pid
    run = server.run([sys.executable, "-m", "timeit", "-n", "1", "-r", "1", "pass"])
    assert run.returncode == 0
    server.stop()
    server.stop()  # idempotent
    assert _gone(server.pid)
    with pytest.raises(forkserver.ZygoteGone):
        server.run([sys.executable, "-m", "timeit", "pass"])


HELPER = textwrap.dedent(
    """
    import sys
    from mlbaseline.runners.forkserver import ForkServer
    with ForkServer(preload=()) as s:
        print(s.ready()["pid"], flush=True)
        run = s.run([sys.executable, "-m", "timeit", "-n", "1", "-r", "1",
                     "import time; time.sleep(60)"])
        print(run.returncode, run.interrupted, run.error, flush=True)
    """
)


def _helper_with_a_running_child() -> tuple[subprocess.Popen[str], int, int, Path]:
    """A parent process whose forked child sleeps: (it, its zygote's pid, the child's pid, the
    server's folder)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HELPER],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,  # its own group: a Ctrl-C to it reaches nothing else
    )
    assert proc.stdout is not None
    zygote = int(proc.stdout.readline())
    deadline = time.monotonic() + 10
    while not psutil.Process(zygote).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    folder = Path(psutil.Process(zygote).cmdline()[3])
    assert folder.is_dir() and folder.name.startswith("mlb-forkserver-")
    return proc, zygote, psutil.Process(zygote).children()[0].pid, folder


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_a_parent_killed_mid_replicate_leaves_no_zygote_nor_child(how: str) -> None:
    proc, zygote, child, folder = _helper_with_a_running_child()
    proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
    proc.wait(timeout=10)
    assert _gone(zygote) and _gone(child)  # EOF on the zygote's stdin ended both
    assert not folder.exists()  # and the zygote removed the server's folder


def test_ctrl_c_reaches_the_child_and_the_run_says_interrupted() -> None:
    proc, zygote, child, folder = _helper_with_a_running_child()
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole group
    out, _ = proc.communicate(timeout=30)
    code, interrupted, error = out.split(" ", 2)
    assert code == "1" and interrupted == "True" and "KeyboardInterrupt" in error
    assert proc.returncode == 0 and _gone(zygote) and _gone(child) and not folder.exists()


def _throughput(**over: object) -> SimpleNamespace:
    return SimpleNamespace(**{"replicate_start": "fork", "nproc": 1, **over})


def test_fresh_where_a_fork_cannot_stand_in(monkeypatch) -> None:
    assert start_method(_throughput()) == ("fork", None)
    assert start_method(_throughput(replicate_start="fresh")) == ("fresh", None)
    assert start_method(_throughput(nproc=2))[1] == "nproc 2: each replicate launches its own ranks"
    assert "torchrun" in str(start_method(_throughput(), under_torchrun=True)[1])
    monkeypatch.setattr(sys, "platform", "darwin")
    assert start_method(_throughput())[0] == "fresh"
    monkeypatch.delattr(os, "fork")
    assert start_method(_throughput()) == ("fresh", "no os.fork on this platform")


def test_a_lost_zygote_falls_back_to_fresh_and_says_so(monkeypatch) -> None:
    calls: list[list[str]] = []

    def fresh(cmd) -> ChildRun:
        calls.append(list(cmd))
        return ChildRun(None, "", 0, False)

    with launcher(_throughput(replicate_start="fresh"), fresh) as (launch, record):
        assert launch is fresh and record == {"asked": "fresh", "start": "fresh", "reason": None}
    monkeypatch.setattr(forkserver, "ZYGOTE", "no_such_zygote")  # the zygote dies at once
    with launcher(_throughput(), fresh) as (launch, record):
        assert record["start"] == "fork"
        launch([sys.executable, "-m", "mlbaseline", "throughput"])
        launch([sys.executable, "-m", "mlbaseline", "throughput"])
    assert len(calls) == 2 and record["start"] == "fresh"
    assert "No module named no_such_zygote" in record["reason"]


def test_replicates_record_how_they_started(tmp_path) -> None:
    from mlbaseline.measure.gpu import NullProbe
    from mlbaseline.runners.throughput import run_throughput

    over = {**TINY, "throughput.repeats": 2, "throughput.replicate_start": "fork"}
    result = run_throughput(resolve(None, "demo", over), probe=NullProbe(), output_dir=tmp_path)
    assert result.status == "complete", result.notes
    started = result.data["replicate_start"]
    assert started["asked"] == started["start"] == "fork" and started["reason"] is None
    assert started["zygote_import_s"] > 0
    assert sorted(set(result.measurements["train.bs4.step"].replicate)) == [0, 1]
    assert resolve(None, "demo").throughput.replicate_start == "fresh"  # the default (A/A)
