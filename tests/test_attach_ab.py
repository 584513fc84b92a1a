"""`mlb ab --attach` / `--ref-a --ref-b`: the child's turn sink (fake fds), the parent's turn
loop (a fake spawner), and the whole path on a throwaway git repository made in the test."""

from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.config import resolve
from mlbaseline.measure.clock import ManualClock
from mlbaseline.measure.loop import StopRule
from mlbaseline.measure.timers import StepTimes
from mlbaseline.results import load_result, write_result
from mlbaseline.runners import attach_turns
from mlbaseline.runners.attach_ab import LONG, SHORT, ScriptArm, run_ab_attach
from mlbaseline.runners.attach_turns import TurnSink
from mlbaseline.runners.attach_units import paired_figure, turn_times, unit_times

runner = CliRunner()
GOLDEN_THROUGHPUT = Path(__file__).resolve().parent / "golden/report/throughput.json"
RULE = StopRule(warmup_min=1, warmup_window=4, warmup_max=10, max_time_s=1e9)
STAGES = {
    "data_wait": 0.001,
    "forward": 0.004,
    "loss": 0.001,
    "backward": 0.006,
    "optimizer": 0.002,
}


def record(scale: float = 1.0, **extra: float) -> dict[str, Any]:
    stages = {k: v * scale for k, v in {**STAGES, **extra}.items()}
    return {"total_s": sum(stages.values()) + 0.0005, "stages": stages, "samples": 8}


class Stopped(Exception):
    pass


def _stop() -> None:
    raise Stopped


def sink_with(commands: list[dict[str, Any]], clock: ManualClock) -> tuple[TurnSink, list]:
    events: list[dict[str, Any]] = []
    control = io.StringIO("".join(json.dumps(c) + "\n" for c in commands))
    return TurnSink(control, events.append, clock, RULE, exit=_stop), events


# ------------------------------------------------------------------ the child's turn sink


def test_sink_warms_up_then_measures_turns_on_command() -> None:
    clock = ManualClock()
    sink, events = sink_with([{"cmd": "go", "seconds": 0.05}, {"cmd": "stop"}], clock)
    with pytest.raises(Stopped):
        for _ in range(100):
            sink.on_step(record())
            clock.advance(0.0145)
    kinds = [e["event"] for e in events]
    assert kinds == ["measuring", "turn"]
    turn = events[1]["steps"]
    # the step after the wait is dropped; then steps until 0.05 s have passed (>= 3 steps)
    assert len(turn) == 3
    assert turn[0]["stages"]["forward"] == pytest.approx(0.004)
    assert turn[0]["step"] == pytest.approx(0.0145)
    assert turn[0]["samples"] == 8


def test_sink_blocks_until_told_and_the_parent_gone_ends_the_script() -> None:
    clock = ManualClock()
    sink, events = sink_with([], clock)  # control at EOF: the parent is gone
    with pytest.raises(Stopped):
        for _ in range(50):
            sink.on_step(record())
            clock.advance(0.01)
    assert [e["event"] for e in events] == ["measuring"]


def test_sink_bad_command_is_an_error_event_then_stop() -> None:
    clock = ManualClock()
    sink, events = sink_with([{"cmd": "go", "seconds": -1}], clock)
    with pytest.raises(Stopped):
        for _ in range(50):
            sink.on_step(record())
    assert events[-1]["event"] == "error"
    assert "seconds > 0" in events[-1]["message"]


def test_sink_close_mid_turn_writes_a_partial_turn() -> None:
    clock = ManualClock()
    sink, events = sink_with([{"cmd": "go", "seconds": 100}], clock)
    for _ in range(20):
        sink.on_step(record())
        clock.advance(0.01)
    sink.close()
    assert events[-1]["event"] == "turn" and events[-1]["partial"] is True
    assert events[-1]["steps"]


def test_sink_close_during_warmup_says_why() -> None:
    sink, events = sink_with([], ManualClock())
    sink.on_step(record())
    sink.close()
    assert events == [
        {"event": "error", "message": "the script ended after 1 steps, before its warm-up was over"}
    ]


def test_sink_over_real_pipes_from_env() -> None:
    """The fds a parent passes: commands in, JSON lines out."""
    ctrl_r, ctrl_w = os.pipe()
    stat_r, stat_w = os.pipe()
    env = {attach_turns.CONTROL_FD: str(ctrl_r), attach_turns.STATUS_FD: str(stat_w)}
    sink = attach_turns.from_env(env)
    sink.loop = attach_turns.StepLoop(RULE)
    sink.exit = _stop
    os.write(ctrl_w, b'{"cmd":"go","seconds":1e-9}\n{"cmd":"stop"}\n')
    with pytest.raises(Stopped):
        for _ in range(50):
            sink.on_step(record())
    os.close(stat_w)
    with os.fdopen(stat_r) as f:
        lines = [json.loads(line) for line in f]
    assert [e["event"] for e in lines] == ["measuring", "turn"]
    assert len(lines[1]["steps"]) == attach_turns.MIN_STEPS
    os.close(ctrl_w)
    sink.control.close()


def test_from_env_without_fds_is_a_protocol_error() -> None:
    with pytest.raises(attach_turns.ProtocolError, match="MLB_ATTACH_CONTROL_FD"):
        attach_turns.from_env({})


# ------------------------------------------------------------------ the parent's turn loop


def test_turn_times_medians_custom_stage_and_residual() -> None:
    steps = [attach_turns.step_entry(record(s, attention=0.002)) for s in (1.0, 1.0, 1.1, 0.9, 5.0)]
    times, samples = turn_times(steps)
    assert times.total_s == pytest.approx(sum(STAGES.values()) + 0.002 + 0.0005)
    assert times.stages["attention"] == pytest.approx(0.002)
    assert times.stages["residual"] == pytest.approx(0.0005)
    assert samples == 8


class FakeChild:
    """An arm process: answers go with a turn of steps `slow`× slower in `stage`; `ends`:
    the turn after which it ends as if its script had finished."""

    def __init__(self, log: list[str], arm: str, slow: float, stage: str, ends: int | None):
        self.log, self.arm, self.slow, self.stage, self.ends = log, arm, slow, stage, ends
        self.pending = [{"event": "measuring"}]
        self.turns = 0
        self.ended = False
        self.n = 0

    def send(self, command: dict[str, Any]) -> None:
        self.log.append(f"{self.arm}:{command['cmd']}")
        if command["cmd"] != "go":
            return
        self.turns += 1
        if self.ends is not None and self.turns > self.ends:
            self.pending.append(None)
            return
        steps = []
        for _ in range(6):
            self.n += 1
            jitter = 1 + 0.002 * ((self.n * 7) % 5 - 2)
            extra = {self.stage: STAGES.get(self.stage, 0.002) * (self.slow - 1)}
            rec = record(jitter)
            rec["stages"] = {
                k: v + extra.get(k, 0.0) for k, v in {**rec["stages"], "custom": 0.002}.items()
            }
            rec["total_s"] = sum(rec["stages"].values()) + 0.0005
            steps.append(attach_turns.step_entry(rec))
        self.pending.append({"event": "turn", "steps": steps})

    def pin(self) -> None:
        self.log.append(f"{self.arm}:pin")

    def event(self, timeout_s: float) -> dict[str, Any] | None:
        return self.pending.pop(0) if self.pending else None

    def end(self) -> str:
        self.log.append(f"{self.arm}:end")
        return "exit code 0"


def fake_spawner(
    log: list[str],
    slow: float = 1.0,
    stage: str = "forward",
    ends: int | None = None,
    per_process: dict[str, float] | None = None,
):
    """Arm B's processes `slow`× slower in `stage` (or each process as `per_process` says)."""

    def spawn(arm: ScriptArm, name: str) -> FakeChild:
        log.append(f"{name}:spawn")
        factor = slow if name.startswith("b") else 1.0
        factor = per_process.get(name, 1.0) if per_process is not None else factor
        return FakeChild(log, name, factor, stage, ends)

    return spawn


def spawned(log: list[str], arm: str) -> int:
    return sum(1 for e in log if e.startswith(arm) and e.endswith(":spawn"))


def arms(tmp_path: Path) -> tuple[ScriptArm, ScriptArm]:
    cmd = ("python", "train.py")
    return ScriptArm(cmd, tmp_path, ref="HEAD~1", commit="a" * 40), ScriptArm(cmd, tmp_path)


def test_units_of_processes_alternate_and_the_slow_stage_is_named(tmp_path: Path) -> None:
    log: list[str] = []
    a, b = arms(tmp_path)
    cfg = resolve(None, "demo")
    result = run_ab_attach(
        cfg, a, b, fake_spawner(log, 1.5, "custom"), pairs=18, seed=3, per_process=2
    )
    # one A and one B process per unit of 2 pairs: 9 units, started together, then ended
    assert spawned(log, "a") == 9 and spawned(log, "b") == 9
    assert log[:2] == ["a0:spawn", "b0:spawn"]
    assert log.index("a0:pin") < log.index("a0:go")  # past its warm-up, before its turn
    # the last unit's told to stop as the next one's start, and ended before it measures
    assert log.index("a0:stop") < log.index("a1:spawn") < log.index("a0:end")
    assert log.index("b0:end") < log.index("a1:go")
    assert result.data["processes"] == {"a": 9, "b": 9}
    assert result.data["pairs_done"] == 18 and result.data["pairs_per_process"] == 2
    assert [u["pairs"] for u in result.data["units"]][:2] == [[0, 1], [2, 3]]
    assert len(result.measurements["ab.b.custom"].values) == 9  # judged per unit
    turn = result.data["turns"][0]
    assert turn["unit"] == 0 and turn["step_s"] > 0 and "custom" in turn["stages_s"]
    assert result.environment["blocking"]  # the machine's fingerprint, for the history
    assert result.data["mode"] == LONG
    stages = {s["stage"]: s["verdict"] for s in result.data["stages"]}
    assert stages["custom"] == "regressed"
    assert stages["forward"] != "regressed"
    assert result.data["verdict"] == "regressed"
    assert result.data["refs"] == {"a": {"ref": "HEAD~1", "commit": "a" * 40}}
    assert sorted(log[-2:]) == ["a8:end", "b8:end"]  # all ended
    # the machine's account of the pairs (the arms are this process's children)
    assert [p["phase"] for p in result.data["contamination"]["phases"]] == ["ab pairs"]
    write_result(result, tmp_path / "ab.json")  # the file reads back through its model
    assert load_result(tmp_path / "ab.json").data["mode"] == LONG


def test_the_default_is_16_units_of_8_pairs_of_short_turns(tmp_path: Path) -> None:
    """By default an A and a B process take 8 pairs of 0.25 s turns (a unit), 16 units:
    enough for Holm, and the slow stage is named."""
    log: list[str] = []
    a, b = arms(tmp_path)
    result = run_ab_attach(resolve(None, "demo"), a, b, fake_spawner(log, 1.5, "custom"), seed=3)
    assert result.data["pairs_done"] == 128 and result.data["pairs_per_process"] == 8
    assert result.data["turn_s"] == 0.25
    assert spawned(log, "a") == 16 and len(result.data["units"]) == 16
    assert not any(w["code"] == "too_few_pairs" for w in result.warnings)
    stages = {s["stage"]: s["verdict"] for s in result.data["stages"]}
    assert stages["custom"] == "regressed" and stages["forward"] != "regressed"


def test_a_units_ratio_is_the_median_of_its_pairs_ratios() -> None:
    """A unit's figures: B/A is the median of its pairs' ratios (a burst that hit one turn of
    a pair moves that pair only), split around the unit's geometric level; with two pairs each
    arm's geometric mean; none for a figure a turn has at 0 (each arm's median turn then)."""
    a = [10.0, 12.0, 10.0, 14.0, 10.0]
    b = [10.3, 12.36, 16.0, 14.42, 6.0]  # 3% slower, but pair 2 and 4 hit by bursts
    got = paired_figure(a, b)
    assert got is not None
    assert got[1] / got[0] == pytest.approx(1.03)
    assert math.sqrt(got[0] * got[1]) == pytest.approx(math.prod(a + b) ** (1 / 10))
    two = paired_figure([4.0, 9.0], [1.0, 16.0])
    assert two == (pytest.approx(6.0), pytest.approx(4.0))  # geometric means: 6 and 4
    assert paired_figure([1.0, 0.0], [1.0, 1.0]) is None
    assert paired_figure([], []) is None
    ta = [StepTimes(total_s=t, stages={"fwd": t / 2, "residual": 0.0}) for t in a]
    tb = [StepTimes(total_s=t, stages={"fwd": t / 2, "residual": 0.0}) for t in b]
    ua, ub = unit_times(ta, tb)
    assert ub.total_s / ua.total_s == pytest.approx(1.03)
    assert ub.stages["fwd"] / ua.stages["fwd"] == pytest.approx(1.03)
    assert ua.stages["residual"] == ub.stages["residual"] == 0.0  # the arms' medians


def test_too_few_units_advise_pairs_that_can_decide(tmp_path: Path) -> None:
    """8 pairs in units of 2 are 4 units: no stage can pass Holm, and the advice counts
    pairs (18: 9 units), not units."""
    a, b = arms(tmp_path)
    result = run_ab_attach(
        resolve(None, "demo"), a, b, fake_spawner([], 1.5), pairs=8, seed=3, per_process=2
    )
    warning = next(w for w in result.warnings if w["code"] == "too_few_pairs")
    assert "4 units of 2 pairs" in warning["message"]
    assert "--pairs 18 or more" in warning["message"]
    assert result.data["verdict"] != "regressed"


def test_short_processes_spawn_a_process_per_turn(tmp_path: Path) -> None:
    log: list[str] = []
    a, b = arms(tmp_path)
    result = run_ab_attach(
        resolve(None, "demo"), a, b, fake_spawner(log), pairs=4, seed=1, short=True
    )
    assert result.data["mode"] == SHORT
    assert spawned(log, "a") == 4 and spawned(log, "b") == 4
    assert result.data["pairs_done"] == 4
    assert len(result.data["units"]) == 4  # each pair its own unit


def test_an_arm_that_ends_falls_back_to_short_processes(tmp_path: Path) -> None:
    log: list[str] = []
    a, b = arms(tmp_path)
    cfg = resolve(None, "demo")
    result = run_ab_attach(cfg, a, b, fake_spawner(log, ends=1), pairs=6, seed=1)
    assert result.data["mode"] == f"{LONG}, then {SHORT}"
    assert result.data["fallback"]["reason"].startswith("the process ended during its turn")
    assert len(result.data["dropped"]) == 1  # the pair the ending cut
    assert result.data["pairs_done"] == 5
    units = [u["pairs"] for u in result.data["units"]]
    assert units[0] == [0] and all(len(u) == 1 for u in units[1:])  # then a unit per pair
    assert any(w["code"] == "attach_fallback" for w in result.warnings)


def test_one_slow_process_is_not_a_regression_of_its_arm(tmp_path: Path) -> None:
    """An A/A run where one of B's processes is 1.4× slower in `custom` (two processes of the
    same code differ): one pair of processes per unit, so it is one unit in 9, not every
    pair: nothing is called regressed."""
    log: list[str] = []
    a, b = arms(tmp_path)
    spawn = fake_spawner(log, stage="custom", per_process={"b4": 1.4})
    result = run_ab_attach(resolve(None, "demo"), a, b, spawn, pairs=18, seed=3, per_process=2)
    stages = {s["stage"]: s["verdict"] for s in result.data["stages"]}
    assert stages["custom"] != "regressed"
    assert result.data["verdict"] != "regressed"
    assert all(c.status != "fail" for c in result.verdict.checks)


def test_pairs_per_process_below_one_is_usage_error(tmp_path: Path) -> None:
    from mlbaseline.errors import UsageError

    a, b = arms(tmp_path)
    with pytest.raises(UsageError, match="--pairs-per-process"):
        run_ab_attach(resolve(None, "demo"), a, b, fake_spawner([]), per_process=0)


def test_bad_turn_seconds_is_usage_error(tmp_path: Path) -> None:
    from mlbaseline.errors import UsageError

    a, b = arms(tmp_path)
    with pytest.raises(UsageError, match="--turn-s"):
        run_ab_attach(resolve(None, "demo"), a, b, fake_spawner([]), turn_s=0)


def test_script_arms_in_two_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlbaseline.errors import UsageError
    from mlbaseline.runners.attach_ab import script_arms

    monkeypatch.chdir(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    none = {"a": None, "b": None}
    with script_arms(["python", "t.py"], {"a": other, "b": None}, none, {"b": {"K": "1"}}) as got:
        assert got["a"].cwd == other.resolve() and got["b"].cwd == tmp_path.resolve()
        assert got["b"].env == {"K": "1"} and got["a"].command == ("python", "t.py")
    gone = script_arms(["python"], {"a": None, "b": tmp_path / "gone"}, none, {})
    with pytest.raises(UsageError, match=r"--cwd-b: .*: not a directory"), gone:
        pass
    both = script_arms(["python"], {"a": other, "b": None}, {"a": "x", "b": "y"}, {})
    with pytest.raises(UsageError, match="not with --cwd-a/--cwd-b"), both:
        pass


class SlowControl(io.StringIO):
    """A control pipe whose reads take `wait_s` on the clock (the other arm's turn)."""

    def __init__(self, text: str, clock: ManualClock, wait_s: float) -> None:
        super().__init__(text)
        self.clock, self.wait_s = clock, wait_s

    def readline(self, *args: Any) -> str:  # type: ignore[override]
        self.clock.advance(self.wait_s)
        return super().readline(*args)


def test_sink_drops_the_step_the_wait_fell_into_even_behind_queued_steps() -> None:
    """On a GPU, steps queued before the wait reach the sink after it: they are kept, the
    one as long as the wait is not."""
    clock = ManualClock()
    text = json.dumps({"cmd": "go", "seconds": 0.05}) + "\n" + json.dumps({"cmd": "stop"}) + "\n"
    events: list[dict[str, Any]] = []
    sink = TurnSink(SlowControl(text, clock, 2.0), events.append, clock, RULE, exit=_stop)
    while sink.loop.warmup is None:
        sink.on_step(record())
    # two queued steps, the step spanning the 2 s wait, then steady steps
    queued = [record(), record(), {**record(), "total_s": 2.01}]
    with pytest.raises(Stopped):
        for rec in [*queued, *[record()] * 20]:
            sink.on_step(rec)
            clock.advance(0.0145)
    turn = events[-1]["steps"]
    assert all(s["step"] < 1.0 for s in turn)
    assert len(turn) >= 4  # the queued two are kept


# ------------------------------------------------------------------ the whole path, for real

TRAIN = """\
import torch

WORK = {work}

torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randint(0, 4, (32,))
w = torch.randn(max(WORK, 1), max(WORK, 1))
for step in range(1_000_000):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    if WORK:
        loss = loss + (w @ w).mean() * 0  # real extra work, inside the loss stage
    loss.backward()
    opt.step()
"""


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
    }
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A throwaway repository: commit 1 a tiny training script, commit 2 the same with a
    bigger matmul in its loss."""
    root = tmp_path / "proj"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "train.py").write_text(TRAIN.format(work=0))
    _git(root, "add", "train.py")
    _git(root, "commit", "-q", "-m", "tiny")
    (root / "train.py").write_text(TRAIN.format(work=160))
    _git(root, "commit", "-q", "-am", "more work in the loss")
    return root


def _mlb(repo: Path, out: Path, *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "mlbaseline", "ab", "--ref-a", "HEAD~1", "--ref-b", "HEAD"]
    cmd += ["--turn-s", "0.1", "-o", str(out), "--no-history", "--quiet", *extra]
    cmd += ["--", sys.executable, "train.py"]
    return subprocess.Popen(
        cmd, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _no_worktrees_left(repo: Path, pid: int) -> None:
    listed = _git(repo, "worktree", "list", "--porcelain")
    assert listed.count("worktree ") == 1, listed  # only the main one
    assert not list(Path(tempfile.gettempdir()).glob(f"mlb-worktree-{pid}-*"))
    assert not list(Path(tempfile.gettempdir()).glob(f"mlb-attach-{pid}-*"))


def test_ref_a_ref_b_names_the_stage_and_removes_the_worktrees(repo: Path) -> None:
    out = repo.parent / "ab.json"
    proc = _mlb(repo, out, "--pairs", "18", "--pairs-per-process", "2")  # 9 units: the fewest
    _, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 1, stderr  # a stage regressed
    result = load_result(out)
    stages = {s["stage"]: s for s in result.data["stages"]}
    assert stages["loss"]["verdict"] == "regressed"
    assert stages["loss"]["ratio"] > 1.5
    assert result.data["mode"] == LONG
    assert result.data["refs"]["a"]["ref"] == "HEAD~1"
    assert result.data["command"][1:] == ["train.py"]
    _no_worktrees_left(repo, proc.pid)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_exits_130_and_removes_the_worktrees(repo: Path, sig: int, code: int) -> None:
    """Ctrl-C (and SIGTERM, handled alike) mid-run: the arms stopped, the worktrees gone."""
    out = repo.parent / "ab.json"
    proc = _mlb(repo, out, "--pairs", "50")
    # Ctrl-C once an arm's first process has started (its log is in the scratch folder)
    deadline = time.monotonic() + 120
    while not list(Path(tempfile.gettempdir()).glob(f"mlb-attach-{proc.pid}-*/*.log")):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr
    _no_worktrees_left(repo, proc.pid)


def test_bad_ref_and_no_repository_are_one_line_errors(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = ["ab", "--no-history", "--quiet"]
    monkeypatch.chdir(repo)
    res = runner.invoke(app, [*base, "--ref-a", "HEAD", "--ref-b", "nope", "--", "python", "x"])
    assert res.exit_code == 2
    assert res.stderr.strip() == f"Error: --ref-b: 'nope': no such commit in {repo.resolve()}"
    elsewhere = tmp_path / "not-a-repo"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    res = runner.invoke(app, [*base, "--ref-a", "HEAD", "--ref-b", "HEAD", "--", "python", "x"])
    assert res.exit_code == 2
    assert res.stderr.startswith("Error: ") and "not inside a git repository" in res.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--attach"], "--attach: give the script's command after --, e.g. -- python train.py"),
        (["--ref-a", "HEAD", "--", "python", "x"], "--ref-b: --ref-a and --ref-b go together"),
        (
            ["--attach", "--set-b", "a=1", "--", "python", "x"],
            "--set-b: not with --attach (the arms are the script's versions)",
        ),
        (
            ["--attach", "--processes", "--", "python", "x"],
            "--processes: not with --attach (the arms are the script's versions)",
        ),
        (["--short-processes"], "--short-processes: only with --attach"),
        (
            ["--attach", "--", "torchrun", "--nproc-per-node", "2", "train.py"],
            "torchrun runs the training in processes of its own, out of mlb attach's reach: "
            "attach to one process of the script (mlb attach -- python train.py …; one that "
            "calls init_process_group needs RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 "
            "MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 in its environment)",
        ),
        (["--", "python", "x"], "unexpected argument 'python' (a script needs --attach)"),
        (["--cpus", "0"], "--cpus: only with --attach"),
        (
            ["--attach", "--cpus", "1-0", "--", "python", "x"],
            "--cpus: '1-0' is not a CPU list like 1, 0,2 or 2-3",
        ),
        (
            ["--attach", "--cpus", "4096", "--", "python", "x"],
            f"--cpus: '4096': CPU(s) 4096 not among those this process may use "
            f"({', '.join(map(str, sorted(os.sched_getaffinity(0))))})",
        ),
    ],
)
def test_attach_usage_errors(args: list[str], message: str) -> None:
    res = runner.invoke(app, ["ab", "--no-history", *args])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == f"Error: {message}"


def test_an_edit_not_yet_committed_is_said_to_be_in_neither_arm(repo: Path) -> None:
    """--ref-b HEAD runs the commit: an edit still in the checkout was not measured, and the
    verdict says so (with the folders route that would measure it)."""
    from mlbaseline.runners.worktrees import uncommitted, worktrees

    assert uncommitted(repo) == ()
    (repo / "notes.txt").write_text("untracked: no arm would have it, nor would it matter\n")
    assert uncommitted(repo) == ()
    (repo / "train.py").write_text(TRAIN.format(work=999))  # edited, not staged
    (repo / "extra.py").write_text("x = 1\n")
    _git(repo, "add", "extra.py")  # staged, not committed
    assert sorted(uncommitted(repo)) == ["extra.py", "train.py"]
    with worktrees({"a": "HEAD~1", "b": "HEAD"}, repo) as trees:
        assert {t.uncommitted for t in trees.values()} == {("extra.py", "train.py")}
        assert "999" not in (trees["b"].cwd / "train.py").read_text()  # the commit's file
    log: list[str] = []
    cmd = ("python", "train.py")
    edits = ("extra.py", "train.py")
    a = ScriptArm(cmd, repo, ref="HEAD~1", commit="a" * 40, uncommitted=edits)
    b = ScriptArm(cmd, repo, ref="HEAD", commit="b" * 40, uncommitted=edits)
    result = run_ab_attach(resolve(None, "demo"), a, b, fake_spawner(log, 1.0), pairs=4, seed=1)
    (warning,) = [w for w in result.warnings if w["code"] == "uncommitted_changes"]
    assert warning["files"] == ["extra.py", "train.py"]
    assert "in neither arm" in warning["message"] and "--cwd-a/--cwd-b" in warning["message"]
    clean = run_ab_attach(resolve(None, "demo"), *arms(repo), fake_spawner([], 1.0), pairs=4)
    assert not [w for w in clean.warnings if w["code"] == "uncommitted_changes"]


def test_the_report_of_an_ab_result_gives_what_was_compared_and_the_verdicts(
    tmp_path: Path,
) -> None:
    """`mlb report ab.json`: the headline names the two arms (command, ref, commit), the A/B
    section has each stage's ratio, CI, p, MDE and verdict; no baseline figures are asked
    for that an A/B result cannot have."""
    a, b = arms(tmp_path)
    result = run_ab_attach(
        resolve(None, "demo"), a, b, fake_spawner([], 1.5, "loss"), pairs=18, per_process=2
    )
    write_result(result, tmp_path / "ab.json")
    res = runner.invoke(app, ["report", str(tmp_path / "ab.json"), "-o", str(tmp_path / "r")])
    assert res.exit_code == 0, res.stderr
    md = (tmp_path / "r" / "baseline_report.md").read_text()
    head = md.split("\n## ", 2)[1]
    assert "**Measured:** B against A, paired (long-lived, 18 pairs in 9 units" in head
    assert "`A: python train.py at HEAD~1 (aaaaaaaaaaaa)`" in head
    assert "No throughput" not in head and "cannot say how small" not in head
    section = md.split("\n## A/B verdicts\n", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in section.splitlines() if line.startswith("| loss |"))
    assert row.endswith("| **regressed** |")
    assert 49 < float(row.split("|")[2].strip().rstrip("%")) < 51  # the fake's +50%
    assert "overall: **regressed**" in section
    assert " ".join(res.stderr.split()).startswith("Measured: B against A, paired")
    plain = runner.invoke(app, ["report", str(GOLDEN_THROUGHPUT), "-o", str(tmp_path / "p")])
    assert plain.exit_code == 0, plain.stderr
    assert "## A/B verdicts" not in (tmp_path / "p" / "baseline_report.md").read_text()


ARM_WITH_THREAD_AND_CHILD = """\
import os, subprocess, sys, threading
import torch
done = threading.Event()
thread = threading.Thread(target=done.wait)
thread.start()
show = "import os, sys; sys.stdin.readline(); print('SUB', sorted(os.sched_getaffinity(0)))"
sub = subprocess.Popen([sys.executable, "-c", show], stdin=subprocess.PIPE, text=True)
print("START", sorted(os.sched_getaffinity(0)), flush=True)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, seen = torch.randn(8, 4), None
try:
    while True:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        tids = [int(t) for t in os.listdir("/proc/self/task")]
        cpus = sorted({c for t in tids for c in os.sched_getaffinity(t)})
        if cpus != seen:
            print("THREADS", cpus, flush=True)
            seen = cpus
finally:
    sub.communicate("go\\n")
    done.set()
    thread.join()
"""


def test_cpus_move_each_arm_process_its_threads_and_children_after_its_warm_up(
    tmp_path: Path,
) -> None:
    """--cpus: an arm's process starts where this one may (its import and warm-up beside the
    other arm's), and once past its warm-up it is moved, every thread and every process it
    started, onto the given CPUs; this process's own CPUs are untouched, and the result says
    where the arms ran."""
    from mlbaseline.envinfo import parse_cpus
    from mlbaseline.runners.attach_ab import spawn_in

    mine = os.sched_getaffinity(0)
    last = max(mine)
    cpus = parse_cpus(str(last))
    arm = ScriptArm((sys.executable, "-c", ARM_WITH_THREAD_AND_CHILD), tmp_path, {})
    child = spawn_in(tmp_path, cpus)(arm, "a")
    while (event := child.event(120)) is not None and event["event"] != "measuring":
        pass
    child.pin()
    child.send({"cmd": "go", "seconds": 0.05})
    while (event := child.event(120)) is not None and event["event"] != "turn":
        pass
    assert child.end() == "exit code 0", child.log.read_text()
    out = child.log.read_text()
    assert f"START {sorted(mine)}" in out, out  # started where this process may run
    assert out.count("THREADS") <= 2 and f"THREADS [{last}]" in out, out  # then every thread
    assert f"SUB [{last}]" in out, out  # and the process it had started
    assert os.sched_getaffinity(0) == mine
    assert parse_cpus(f"{min(mine)}-{last}") == frozenset(range(min(mine), last + 1))
    a, b = arms(tmp_path)
    result = run_ab_attach(
        resolve(None, "demo"), a, b, fake_spawner([], 1.0), pairs=4, seed=1, cpus=cpus
    )
    assert result.data["cpus"] == [last]
    write_result(result, tmp_path / "ab.json")
    assert load_result(tmp_path / "ab.json").data["cpus"] == [last]
    from rich.console import Console

    from mlbaseline.cli.ab import render
    from mlbaseline.cli.common import Ui
    from mlbaseline.progress import NullProgress

    console = Console(record=True, width=100, file=io.StringIO())
    render(result, Ui(console, NullProgress(), False))
    assert f", on CPUs {last}" in console.export_text()
    report = runner.invoke(app, ["report", str(tmp_path / "ab.json"), "-o", str(tmp_path / "r")])
    assert report.exit_code == 0, report.output
    text = (tmp_path / "r" / "baseline_report.md").read_text()
    assert f", on CPUs {last}" in text


ARM_WITH_EXIT_WORK = """\
import atexit, os, sys
from pathlib import Path
import torch

OUT = Path(sys.argv[1])


class Teardown:  # its __del__ runs when the interpreter tears its modules down
    def __del__(self):
        (OUT / "teardown").write_text("ran")


KEEP = Teardown()
atexit.register(lambda: (OUT / "atexit").write_text("ran"))
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 4)
try:
    while True:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
finally:
    (OUT / "finally").write_text("ran")
    print("BYE", flush=True)
"""


@pytest.mark.parametrize("stop", [True, False], ids=["stopped", "ended-by-itself"])
def test_a_stopped_arm_skips_the_interpreters_teardown_only(tmp_path: Path, stop: bool) -> None:
    """An arm `mlb ab` stops runs its script's `finally` blocks and atexit handlers and exits
    0, then skips the interpreter's teardown (torch's took ~0.85 s of CPU a process, beside
    the next unit's start); a script that ends on its own (here: a Ctrl-C of its own, not a
    stop) is not cut short."""
    from mlbaseline.runners.attach_ab import spawn_in

    out = tmp_path / "out"
    out.mkdir()
    arm = ScriptArm((sys.executable, "-c", ARM_WITH_EXIT_WORK, str(out)), tmp_path, {})
    child = spawn_in(tmp_path)(arm, "a")
    while (event := child.event(120)) is not None and event["event"] != "measuring":
        pass
    if stop:
        assert child.end() == "exit code 0", child.log.read_text()
        assert "BYE" in child.log.read_text()  # its output flushed before the quick exit
        assert {p.name for p in out.iterdir()} == {"finally", "atexit"}
    else:
        os.write(child.control, b'{"cmd":"go","seconds":0.05}\n')
        child.proc.send_signal(signal.SIGINT)  # its own KeyboardInterrupt: a traceback
        assert child.proc.wait(60) != 0
        child.end()
        assert "teardown" in {p.name for p in out.iterdir()}


def test_a_wide_mde_unpinned_points_to_cpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Arms not pinned on a machine of two CPUs, units that differ by ±6%: the verdict says
    the step's MDE and that --cpus (with a CPU this machine has) can narrow it; pinned, or
    on one CPU, there is nothing to advise."""
    from mlbaseline.runners import attach_ab

    noisy = {f"b{i}": 1.06 if i % 2 else 0.94 for i in range(6)}
    a, b = arms(tmp_path)
    cfg = resolve(None, "demo")

    def run(**extra: Any) -> Any:
        spawn = fake_spawner([], per_process=noisy)
        return run_ab_attach(cfg, a, b, spawn, pairs=12, seed=1, **extra)

    monkeypatch.setattr(attach_ab, "affinity_list", lambda: [0, 1])
    (warning,) = [w for w in run().warnings if w["code"] == "unpinned_noise"]
    assert warning["value"] > 0.01 and "--cpus 1 (as many CPUs" in warning["message"]
    assert not [w for w in run(cpus=frozenset({1})).warnings if w["code"] == "unpinned_noise"]
    monkeypatch.setattr(attach_ab, "affinity_list", lambda: [0])
    assert not [w for w in run().warnings if w["code"] == "unpinned_noise"]
