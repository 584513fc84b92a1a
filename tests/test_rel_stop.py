"""Stop and status, one run per folder (docs/RELIABILITY.md 5.3): SIGTERM and SIGHUP handled
as Ctrl-C through real `mlb` processes, `baseline.json` saying `running` until the run is
done, scratch trees of a SIGKILLed process swept at the next start, the folder lock held by
a second real process.

The child processes say when they measure (the workload prints a line on its 20th forward):
the signal is sent then, never after a fixed sleep."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from mlbaseline import folderlock, scratch, stopping
from mlbaseline.cli import app
from mlbaseline.config import resolve
from mlbaseline.errors import OutputError
from mlbaseline.measure.gpu import NullProbe
from mlbaseline.results import Result, load_result
from mlbaseline.runners import run as runmod

ROOT = Path(__file__).resolve().parents[1]
MEASURING = "mlb-test: measuring"
BOUND_S = 180  # a child that does not end this long after its signal is a failure
runner = CliRunner()


class MarkingModel(nn.Module):
    """A tiny classifier over 3×16×16 images that says on stderr when it is measuring (its
    20th forward: past the warm-up the config allows), so that a test signals it then."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, num_classes))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 20:
            print(MEASURING, file=sys.stderr, flush=True)
        return self.net(x)


def marking_model(**kwargs: Any) -> MarkingModel:
    return MarkingModel(**kwargs)


# a training sweep that never ends on its own: only the signal stops it
ENDLESS = {
    "workload.model": f"{__name__}:marking_model",
    "workload.image_size": 16,
    "workload.dataset_size": 32,
    "workload.device": "cpu",
    "workload.threads": 1,
    "throughput.mode": "train",
    "throughput.batch_sizes": [4],
    "throughput.repeats": 1,
    "throughput.min_time_s": 3600.0,
    "throughput.max_time_s": 3600.0,
    "throughput.min_steps": 3,
    "throughput.max_steps": 10**8,
    "throughput.warmup_min": 1,
    "throughput.warmup_max": 2,
    "env_check.cpu_idle_window_s": 0.01,
}
SETS = [a for k, v in ENDLESS.items() for a in ("--set", f"{k}={json.dumps(v)}")]


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    return {**os.environ, "PYTHONPATH": path, "MLB_HISTORY": "", **extra}


def _mlb(args: list[str], cwd: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mlbaseline", *args],
        cwd=cwd,
        env=_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_line(proc: subprocess.Popen[str], text: str, timeout: float = BOUND_S) -> str:
    """Read the child's stderr until `text` (select with a deadline: no sleep, no hang)."""
    assert proc.stderr is not None
    seen = ""
    fd = proc.stderr.fileno()
    while text not in seen:
        ready, _, _ = select.select([fd], [], [], timeout)
        chunk = os.read(fd, 65536).decode(errors="replace") if ready else ""
        if not chunk:
            proc.kill()
            pytest.fail(f"the child never said {text!r}; its stderr:\n{seen}")
        seen += chunk
    return seen


def _stop(proc: subprocess.Popen[str], sig: int) -> tuple[int, str]:
    before = _wait_for_line(proc, MEASURING)
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"no exit {BOUND_S} s after the signal")
    return proc.returncode, before + err


# ---------------------------------------------------------------- SIGTERM / SIGHUP


@pytest.mark.parametrize(
    ("sig", "code"),
    [
        pytest.param(signal.SIGTERM, 143, id="throughput-sigterm"),
        pytest.param(signal.SIGHUP, 129, id="throughput-sighup"),
    ],
)
def test_stop_signal_keeps_the_measured_steps(tmp_path: Path, sig: int, code: int):
    out = tmp_path / "tp.json"
    proc = _mlb(["throughput", "-o", str(out), *SETS], tmp_path)
    rc, err = _stop(proc, sig)
    name = signal.Signals(sig).name
    assert rc == code, err
    doc = json.loads(out.read_text())
    assert doc["status"] == "interrupted"
    assert any(name in note for note in doc["notes"]), doc["notes"]
    assert len(doc["measurements"]["train.bs4.step"]["values"]) >= 1
    assert (tmp_path / doc["artifacts"]["telemetry"]).is_file()  # the CSV is kept too
    assert "Traceback" not in err


def test_sigterm_through_mlb_run_keeps_the_finished_phases(tmp_path: Path):
    out = tmp_path / "run"
    args = ["run", "-o", str(out), "--ignore-env", "--skip", "dataloader,latency", *SETS]
    rc, err = _stop(_mlb(args, tmp_path), signal.SIGTERM)
    assert rc == 143, err
    base = load_result(out / "baseline.json", kinds=["run"])
    assert base.status == "interrupted"
    assert any("SIGTERM" in n for n in base.notes), base.notes
    assert load_result(out / "env_check.json").status == "complete"
    thr = load_result(out / "throughput.json")
    assert thr.status == "interrupted" and thr.measurements["train.bs4.step"].values
    assert not (out / folderlock.LOCK_NAME).exists()  # the lock goes with the run
    assert "Traceback" not in err


def test_a_child_gets_the_stop_signal_passed_on(monkeypatch: pytest.MonkeyPatch):
    """A fresh-process replicate got no SIGTERM from the terminal (only the parent did): the
    parent passes it on at once instead of waiting for a child that never heard it."""
    from mlbaseline.runners import children

    sent: list[int] = []

    class Child:
        returncode = 143

        def __init__(self, *a: Any, **k: Any) -> None:
            self.calls = 0

        def communicate(self, timeout: float | None = None) -> tuple[str, str]:
            self.calls += 1
            if self.calls == 1:
                raise stopping.Terminated(signal.SIGTERM)
            assert sent == [signal.SIGTERM], "the child waits only after it got the signal"
            return "", "Error: interrupted (SIGTERM)\n"

        def send_signal(self, sig: int) -> None:
            sent.append(sig)

    monkeypatch.setattr(children.subprocess, "Popen", Child)
    run = children.run_child(["mlb", "throughput"])
    assert run.interrupted and run.returncode == 143 and sent == [signal.SIGTERM]


# ---------------------------------------------------------------- baseline.json status


def _fake(kind: str, seen: dict[str, str] | None = None) -> Any:
    def phase(run: Any, sampler: Any) -> Result:
        if seen is not None:  # what a reader finds in the folder while the run goes on
            seen["status"] = json.loads((run.out_dir / runmod.BASELINE).read_text())["status"]
        return Result(kind=kind)

    return phase


QUICK_ENV = resolve(overrides={"env_check.cpu_idle_window_s": 0.01})  # the real env-check
FAKED = {"dataloader", "report"}


def _fake_phases(monkeypatch: pytest.MonkeyPatch, seen: dict[str, str]) -> None:
    monkeypatch.setitem(runmod._RUNNERS, "throughput", _fake("throughput", seen))
    monkeypatch.setitem(runmod._RUNNERS, "latency", _fake("latency"))


def test_baseline_json_says_running_until_the_last_phase(tmp_path, monkeypatch):
    seen: dict[str, str] = {}
    _fake_phases(monkeypatch, seen)
    out = tmp_path / "run"
    outcome = runmod.run_baseline(QUICK_ENV, out, NullProbe(), skip=FAKED, ignore_env=True)
    assert seen["status"] == "running"  # env-check was done, throughput under way
    assert outcome.baseline.status == "complete"
    assert load_result(out / runmod.BASELINE).status == "complete"


def test_a_full_disk_mid_run_never_leaves_complete(tmp_path, monkeypatch):
    """The disk fills after env-check: the phase file and baseline.json cannot be written;
    the last baseline.json that could be says `running`, and a reader calls it incomplete."""
    _fake_phases(monkeypatch, {})
    real = runmod.write_result

    full: list[bool] = []

    def full_after_env_check(result: Result, path: Path, force: bool = False) -> Path:
        if full or path.name == "throughput.json":  # from the second phase's file on
            full.append(True)
            raise OutputError(f"{path}: No space left on device")
        return real(result, path, force=force)

    monkeypatch.setattr(runmod, "write_result", full_after_env_check)
    out = tmp_path / "run"
    with pytest.raises(OutputError, match="No space left"):
        runmod.run_baseline(QUICK_ENV, out, NullProbe(), skip=FAKED, ignore_env=True)
    assert load_result(out / runmod.BASELINE).status == "running"
    _check_read_as_incomplete(out / runmod.BASELINE, tmp_path)


def _check_read_as_incomplete(path: Path, tmp_path: Path) -> None:
    """`mlb report` and the history say `incomplete` of a leftover `running` file."""
    from mlbaseline.history.record import record_of

    res = runner.invoke(app, ["report", str(path), "-o", str(tmp_path / "rep"), "--no-history"])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "rep" / "baseline_report.md").read_text()
    assert "status **incomplete**" in md and "never finished" in md
    assert record_of(load_result(path), path.read_bytes(), path).status == "incomplete"


def test_a_sigkilled_run_reads_as_incomplete(tmp_path: Path):
    out = tmp_path / "run"
    args = ["run", "-o", str(out), "--ignore-env", "--skip", "dataloader,latency", *SETS]
    proc = _mlb(args, tmp_path)
    _wait_for_line(proc, MEASURING)
    proc.kill()
    proc.communicate(timeout=BOUND_S)
    assert load_result(out / runmod.BASELINE).status == "running"  # env-check done, no more
    _check_read_as_incomplete(out / runmod.BASELINE, tmp_path)
    # the killed run's lock file is no lock: the kernel let go of it with the process
    with folderlock.locked(out) as lock:
        assert lock is not None and lock.path.read_text().strip() == str(os.getpid())


# ---------------------------------------------------------------- temporary trees


def _holder(code: str, tmp: Path) -> subprocess.Popen[str]:
    """A second real process running `code`, which prints one line when ready and then waits
    on its stdin (the test ends it by closing stdin or by SIGKILL)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", f"{code}\nimport sys; sys.stdin.read()"],
        env=_env(TMPDIR=str(tmp)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc


def test_scratch_trees_of_a_killed_process_go_at_the_next_start(tmp_path, monkeypatch):
    code = "from mlbaseline import scratch; print(scratch.make('dataloader'), flush=True)"
    killed = _holder(code, tmp_path)
    dead = Path(killed.stdout.readline().strip())
    (dead / "img_0.png").write_bytes(b"x")
    killed.kill()
    killed.wait(BOUND_S)
    alive = _holder(code, tmp_path)
    living = Path(alive.stdout.readline().strip())
    foreign = tmp_path / "mlb-dataloader-notapid"
    foreign.mkdir()
    assert dead.is_dir() and scratch.owner(dead) == killed.pid
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    try:
        res = runner.invoke(app, ["compare", "missing-a.json", "missing-b.json"])
        assert res.exit_code == 2  # any command sweeps as it starts, even a refused one
        assert not dead.exists(), "the tree of the SIGKILLed process is removed"
        assert living.is_dir() and foreign.is_dir(), "a live owner's or a foreign tree stays"
    finally:
        alive.communicate("", timeout=BOUND_S)


def test_the_dataloader_makes_its_tree_as_a_scratch_folder(tmp_path, monkeypatch):
    from mlbaseline.runners.dataloader import run_dataloader

    made: list[Path] = []
    real = scratch.make

    def spy(kind: str, parent: Path | None = None) -> Path:
        made.append(real(kind, parent))
        return made[-1]

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(scratch, "make", spy)
    cfg = resolve(
        overrides={
            "dataloader.workers": [0],
            "dataloader.batches": 1,
            "dataloader.batch_size": 2,
            "dataloader.synthetic_images": 4,
            "dataloader.persistent_epochs": 0,
            "dataloader.cold_cache": False,
        }
    )
    run_dataloader(cfg, None)
    assert [scratch.owner(p) for p in made] == [os.getpid()]
    assert made[0].parent == tmp_path and not made[0].exists()


# ---------------------------------------------------------------- one run per folder


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["run", "--force", "--skip", "dataloader,latency"], id="run"),
        pytest.param(["report", "RESULT", "--force"], id="report"),
    ],
)
def test_a_second_command_into_a_locked_folder_is_refused(tmp_path, command):
    folder = tmp_path / "out"
    code = f"from mlbaseline import folderlock; folderlock.acquire({str(folder)!r}); print('ok')"
    holder = _holder(code, tmp_path)
    try:
        assert holder.stdout.readline().strip() == "ok"  # the first process holds the lock
        before = sorted(p.name for p in folder.iterdir())
        result = tmp_path / "r.json"
        result.write_text(Result(kind="throughput").to_json())
        args = [str(result) if a == "RESULT" else a for a in command]
        res = runner.invoke(app, [*args, "-o", str(folder), "--quiet", "--no-history"])
        assert res.exit_code == 2, res.output
        assert res.stderr.strip() == f"Error: {folder} is in use by pid {holder.pid}"
        assert sorted(p.name for p in folder.iterdir()) == before  # nothing written
    finally:
        holder.communicate("", timeout=BOUND_S)
    # the holder ended without letting go: its lock file stays, but the lock went with it
    assert (folder / folderlock.LOCK_NAME).exists()
    with folderlock.locked(folder) as lock:
        assert lock is not None and lock.path.read_text().strip() == str(os.getpid())


def test_the_lock_is_reentrant_in_one_process_and_leaves_no_empty_folder(tmp_path):
    folder = tmp_path / "new"
    with folderlock.locked(folder) as outer, folderlock.locked(folder) as inner:
        assert outer is inner and (folder / folderlock.LOCK_NAME).is_file()
    assert not folder.exists()  # made for the lock, nothing written: removed with it


def test_the_library_api_names_the_stop_signal(tmp_path: Path):
    """A training loop run under `stopping.stop_signals()` (the library installs no handler in
    the user's process itself): a real SIGTERM ends it as Ctrl-C does, the note names it."""
    from test_api import baseline, fake_loader

    from mlbaseline.measure.clock import ManualClock

    clock = ManualClock()
    bl = baseline(clock)
    try:
        with pytest.raises(stopping.Terminated), stopping.stop_signals():
            for i, _b in enumerate(bl.data(fake_loader(clock, 0.001))):
                with bl.step():
                    clock.advance(0.01)
                    if i == 6:
                        os.kill(os.getpid(), signal.SIGTERM)  # delivered here, in this thread
        r = load_result(bl.save(tmp_path / "r.json"))
    finally:
        stopping.reset()  # this process's record of the signal: not for the next test
    assert r.status == "interrupted" and len(bl.loop.records) == 6
    assert any("SIGTERM" in n for n in r.notes), r.notes
