"""`mlb attach`: a few real runs of tiny scripts (fresh interpreters), and the child's sink and
the parent's pieces without a process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from mlbaseline.config import resolve
from mlbaseline.measure.hooks import HookStep
from mlbaseline.results import load_result
from mlbaseline.runners import attach, attach_child

# fast stop rule: a tiny model's steps, stable at a loose tolerance after a short warm-up
FAST = """\
throughput:
  min_time_s: 0
  min_steps: 6
  window: 4
  stability_windows: 2
  stability_tolerance: 0.5
  warmup_min: 2
  warmup_max: 10
  max_time_s: 30
  telemetry: false
"""
SCRIPT = '''\
"""A plain DataLoader loop: a tiny MLP on random data."""
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))), batch_size=4)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss_fn = nn.CrossEntropyLoss()
print("script: starting")
done, epoch = 0, 0
while done < steps:
    epoch += 1
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        done += 1
        if done == steps:
            break
    print(f"epoch {epoch} loss {loss.item():.3f}", file=sys.stderr)
print(f"script: trained {done} steps")
'''


def _env(tmp_path: Path) -> dict[str, str]:
    """mlb's history and scratch folders inside the test's folder."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    history = str(tmp_path / "history.sqlite")
    return {**os.environ, "MLB_HISTORY": history, "TMPDIR": str(tmp_path / "tmp")}


def _mlb(tmp_path: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    run = subprocess.run(
        [sys.executable, "-m", "mlbaseline", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(tmp_path),
        timeout=timeout,
    )
    assert not list((tmp_path / "tmp").glob("mlb-*")), "a scratch folder was left behind"
    return run


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "fast.yaml").write_text(FAST)
    (tmp_path / "train.py").write_text(SCRIPT)
    return tmp_path


def test_attach_measures_a_plain_script_leaving_its_output_alone(project: Path) -> None:
    opts = ["-c", "fast.yaml", "--repeats", "1", "-o", "a.json"]
    run = _mlb(project, "attach", *opts, "--", sys.executable, "train.py")
    assert run.returncode == 0, run.stderr
    # the script's stdout is exactly its own: stopped after the stop rule (SIGINT), so it
    # never printed its last line, and mlb printed nothing there
    assert run.stdout == "script: starting\n"
    result = load_result(project / "a.json", ["throughput"])
    assert result.data["source"] == "attach"
    block = result.data["attach"]
    assert block["script"] == "train.py" and len(block["script_sha256"]) == 64
    assert block["then"] == "stop" and block["ended"].startswith("stopped by SIGINT")
    assert (block["boundary"], block["micro_batches"]) == ("optimizer", 1)
    step = result.measurements["train.bs4.step"]
    assert len(step.values) >= 6
    stages = ("data_wait", "forward", "loss", "backward", "optimizer")
    assert all(sum(result.measurements[f"train.bs4.{s}"].values) > 0 for s in stages)
    assert "recorded in the history" in run.stderr
    # the machine's account of the measured window, as every throughput result has it
    assert [p["phase"] for p in result.data["contamination"]["phases"]] == ["process 1"]
    # another command reads it as any throughput result
    compare = _mlb(project, "compare", "a.json", "a.json", "--no-history")
    assert compare.returncode in (0, 1), compare.stderr


def test_repeats_pool_fresh_processes_and_continue_lets_the_last_finish(project: Path) -> None:
    opts = ["-c", "fast.yaml", "--repeats", "2", "--then", "continue", "--json", "b.json"]
    run = _mlb(project, "attach", *opts, "--no-history", "--", sys.executable, "train.py", "3000")
    assert run.returncode == 0, run.stderr
    # the first process is stopped once measured; the last one trains on to its end
    assert run.stdout.count("script: starting\n") == 2
    assert run.stdout.count("script: trained 3000 steps\n") == 1
    result = load_result(project / "b.json", ["throughput"])
    step = result.measurements["train.bs4.step"]
    assert set(step.replicate or []) == {0, 1}
    assert result.data["repeats"] == 2
    assert "train.bs4.step" in result.data["noise"]
    block = result.data["attach"]
    assert block["then"] == "continue" and block["exit_codes"][-1] == 0
    assert block["exit_codes"][0] != 0  # stopped by SIGINT (a KeyboardInterrupt)
    assert [p["phase"] for p in result.data["contamination"]["phases"]] == [
        "process 1",
        "process 2",
    ]
    first, last = block["ended"].split("; ")
    assert first.startswith("stopped by SIGINT")
    assert last == "trained on unmeasured to its end (exit code 0)"


def test_a_script_that_never_steps_is_killed_after_the_first_step_timeout(project: Path) -> None:
    (project / "idle.py").write_text("import time\ntime.sleep(120)\n")
    opts = ["--first-step-timeout", "0.5", "--no-history"]
    run = _mlb(project, "attach", *opts, "--", sys.executable, "idle.py", timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip().endswith(
        "Error: no training step seen in 0.5 s (is this a training script?)"
    )


def test_sigterm_to_mlb_stops_the_script_and_leaves_no_scratch(project: Path) -> None:
    (project / "idle.py").write_text(
        "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(120)\n"
    )
    cmd = [sys.executable, "-m", "mlbaseline", "attach", "--no-history", "--grace-s", "5"]
    with subprocess.Popen(
        [*cmd, "--", sys.executable, "idle.py"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=project,
        env=_env(project),
    ) as mlb:
        assert mlb.stdout is not None
        script_pid = int(mlb.stdout.readline())  # the script runs
        mlb.send_signal(signal.SIGTERM)
        _, err = mlb.communicate(timeout=60)
    assert mlb.returncode == 143
    assert err.strip().endswith("Error: interrupted (SIGTERM)")
    with pytest.raises(ProcessLookupError):
        os.kill(script_pid, 0)
    assert not list((project / "tmp").glob("mlb-*"))


def test_a_script_that_fails_gives_its_exit_code_and_last_stderr_lines(project: Path) -> None:
    (project / "bad.py").write_text(
        "import sys\nprint('out line')\nprint('loading data', file=sys.stderr)\n"
        "sys.exit('no such file: data.csv')\n"
    )
    run = _mlb(project, "attach", "--no-history", "--", sys.executable, "bad.py", timeout=60)
    assert run.returncode == 2
    assert run.stdout == "out line\n"
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: the script exited with code 1")
    assert "loading data | no such file: data.csv" in last


def test_the_options_of_the_script_are_its_own(project: Path) -> None:
    run = _mlb(project, "attach", "--show-config", sys.executable, "train.py", "--lr", "3")
    assert run.returncode == 0, run.stderr  # --lr went to the script, not to mlb


# ---------------------------------------------------------------- without a process


def _steps(n: int, total: float = 0.01) -> list[HookStep]:
    stages = {"data_wait": 0.001, "h2d": 0.0, "forward": 0.003, "loss": 0.001}
    stages |= {"backward": 0.003, "optimizer": 0.001}
    return [HookStep(total, dict(stages), 0.0, 2, 16, "optimizer", 8) for _ in range(n)]


def test_the_measuring_sink_writes_the_result_once_the_stop_rule_is_met(tmp_path: Path) -> None:
    (tmp_path / "fast.yaml").write_text(FAST)
    cfg = resolve(tmp_path / "fast.yaml")
    events: list[dict[str, Any]] = []
    meta = {"command": ["python", "t.py"], "script": "t.py", "then": "stop"}
    sink = attach_child.MeasureSink(cfg, events.append, tmp_path / "r.json", meta)
    for step in _steps(200):
        sink.on_step(step)
        if sink.done:
            break
    assert [e["event"] for e in events] == ["first_step", "measuring", "done"]
    assert not events[-1]["partial"]
    result = load_result(tmp_path / "r.json", ["throughput"])
    assert result.data["attach"]["micro_batches"] == 2
    assert result.data["batch_sizes"]["8"]["stop_reason"] == "stable"
    assert result.config["workload"]["grad_accum"] == 2
    assert result.measurements["train.bs8.samples_per_s"].values[0] == pytest.approx(1600)
    assert result.measurements["train.bs8.residual"].values[0] == pytest.approx(0.001)
    sink.on_step(_steps(1)[0])  # after done: nothing more
    assert len(events) == 3


def test_a_script_that_ends_early_gives_the_steps_it_ran(tmp_path: Path) -> None:
    cfg = resolve(None)
    events: list[dict[str, Any]] = []
    sink = attach_child.MeasureSink(cfg, events.append, tmp_path / "r.json", {"command": []})
    for step in _steps(5):
        sink.on_step(step)
    sink.close()
    assert events[-1]["event"] == "done" and events[-1]["partial"]
    result = load_result(tmp_path / "r.json", ["throughput"])
    assert result.data["batch_sizes"]["8"]["stop_reason"] == attach_child.ENDED
    none: list[dict[str, Any]] = []
    attach_child.MeasureSink(cfg, none.append, tmp_path / "x.json", {}).close()
    assert none == [{"event": "error", "message": "no training step seen", "at_exit": True}]
    warm: list[dict[str, Any]] = []  # every step warm-up (warmup_min 3): no file, why
    sink = attach_child.MeasureSink(cfg, warm.append, tmp_path / "w.json", {"command": []})
    for step in _steps(cfg.throughput.warmup_min):
        sink.on_step(step)
    sink.close()
    assert warm[-1]["event"] == "error" and warm[-1]["at_exit"]
    assert "all of them warm-up: none was measured" in warm[-1]["message"]
    assert not (tmp_path / "w.json").exists()


def test_boot_takes_the_protocol_out_of_the_environment() -> None:
    env = {
        attach_child.MODE: "measure",
        attach_child.PYTHONPATH: "/the/scripts/own",
        attach_child.OUT: "/tmp/r.json",
        "PYTHONPATH": "/scratch:/the/scripts/own",
        "HOME": "/home/u",
    }
    seen: list[Any] = []
    hook = attach_child.after_import
    attach_child.after_import = lambda name, cb: seen.append(name)  # type: ignore[assignment]
    try:
        attach_child.boot(env)
    finally:
        attach_child.after_import = hook  # type: ignore[assignment]
    assert env == {"PYTHONPATH": "/the/scripts/own", "HOME": "/home/u"}
    assert seen == ["torch"]


def test_after_import_calls_back_now_for_a_module_already_imported() -> None:
    called: list[int] = []
    attach_child.after_import("json", lambda: called.append(1))
    assert called == [1]


def test_child_env_puts_the_boot_folder_first(tmp_path: Path) -> None:
    env = attach.child_env(tmp_path, "turns", 7, 8, base={"PYTHONPATH": "/own", "X": "1"})
    assert env["PYTHONPATH"] == f"{tmp_path}{os.pathsep}/own"
    assert env[attach_child.PYTHONPATH] == "/own"
    assert (env[attach_child.MODE], env[attach_child.STATUS_FD]) == ("turns", "7")
    assert env[attach_child.CONTROL_FD] == "8" and env["X"] == "1"
    attach.write_boot(tmp_path)
    assert "attach_child import boot" in (tmp_path / "sitecustomize.py").read_text()
    assert (tmp_path / "mlbaseline" / "runners" / "attach_child.py").is_file()


def test_script_facts_names_the_script_and_hashes_it(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("print(1)\n")
    facts = attach.script_facts(["python3", "-X", "dev", "-u", "t.py", "--lr", "3"], tmp_path)
    assert facts["script"] == "t.py" and len(facts["script_sha256"]) == 64
    assert attach.script_facts(["python", "-m", "pkg.train"])["script"] == "-m pkg.train"
    assert attach.script_facts(["./run.sh"], tmp_path)["script_sha256"] is None


def test_stderr_tee_passes_everything_on_and_keeps_the_last_lines() -> None:
    read, write = os.pipe()
    out: list[bytes] = []
    with os.fdopen(read, "rb") as stream:
        tee = attach.StderrTee(stream, out.append)
        os.write(
            write,
            textwrap.dedent("""\
            line 1
            progress 10%\rprogress 100%
            """).encode()
            + b"".join(f"l{i}\n".encode() for i in range(30))
            + b"last",
        )
        os.close(write)
        tail = tee.tail()
    assert b"".join(out).startswith(b"line 1\nprogress 10%\rprogress 100%\n")
    assert tail[-2:] == ["l29", "last"] and len(tail) == attach.TAIL_LINES


def test_status_reader_reads_json_lines() -> None:
    read, write = os.pipe()
    reader = attach.StatusReader(read)
    os.write(write, b'{"event":"first_step"}\n{"event":"done","res')
    assert reader.events(1.0) == [{"event": "first_step"}]
    os.write(write, b'ult":"r.json"}\nnot json\n')
    assert reader.events(1.0) == [{"event": "done", "result": "r.json"}]
    os.close(write)
    assert reader.events(1.0) == [] and reader.closed
    os.close(read)


def test_a_then_that_does_not_exist_is_refused() -> None:
    from mlbaseline.errors import UsageError

    with pytest.raises(UsageError, match="--then: 'later'"):
        attach.run_attach(resolve(None), attach.AttachOptions(["python"], then="later"))


def test_processes_pool_with_the_auto_plans_decision(tmp_path: Path) -> None:
    from mlbaseline.runners.replicate_plan import Plan

    (tmp_path / "fast.yaml").write_text(FAST)
    cfg = resolve(tmp_path / "fast.yaml")
    outcomes = []
    for i, total in enumerate((0.010, 0.0101, 0.0099)):
        sink = attach_child.MeasureSink(cfg, lambda e: None, tmp_path / f"r{i}.json", {})
        for step in _steps(200, total):
            sink.on_step(step)
            if sink.done:
                break
        result = load_result(tmp_path / f"r{i}.json", ["throughput"])
        outcomes.append(attach.ChildOutcome(result, "stopped by SIGINT (exit code -2)", -2))
    plan = Plan(min_k=3, max_k=10, target=0.05, budget_s=1000.0)
    assert attach._plan_stop(outcomes[:2], [1.0, 1.0], plan) is None  # below min_k
    block = attach._plan_stop(outcomes, [1.0, 1.0, 1.0], plan)
    assert block is not None and block["stop"] == "target"
    meta = {"command": ["python", "t.py"], "then": "stop"}
    pooled = attach._pooled(cfg, outcomes, block, meta)
    assert set(pooled.measurements["train.bs8.step"].replicate or []) == {0, 1, 2}
    assert pooled.data["replicate_plan"]["replicates"] == 3
    assert pooled.data["attach"]["ended"] == "stopped by SIGINT (exit code -2)"
    assert pooled.data["attach"]["exit_codes"] == [-2, -2, -2]
    assert "train.bs8.step" in pooled.data["noise"]


def test_a_script_that_trains_on_and_then_fails_fails_the_verdict() -> None:
    """--then continue: the measured steps are kept, but a crash after them is not success
    (exit 1); a process mlb stopped, or that the user interrupted while it trained on, is no
    failure of the script."""
    from mlbaseline.cli.common import exit_code_for
    from mlbaseline.results import Result

    def outcome(ended: str, code: int) -> attach.ChildOutcome:
        return attach.ChildOutcome(None, ended, code, ["Traceback", "ValueError: boom"])

    crashed = Result(kind="throughput")
    attach.script_exit_check(
        crashed,
        [
            outcome("stopped by SIGINT (exit code -2)", -2),
            outcome("trained on unmeasured to its end (exit code 3)", 3),
        ],
    )
    (check,) = crashed.verdict.checks
    assert (check.name, check.status, check.value) == ("attach.script_exit", "fail", 3)
    assert "code 3 after it was measured" in check.message and "ValueError: boom" in check.message
    assert int(exit_code_for(crashed)) == 1
    fine = Result(kind="throughput")
    attach.script_exit_check(
        fine,
        [
            outcome("trained on unmeasured to its end (exit code 0)", 0),
            outcome("trained on unmeasured until interrupted; stopped by SIGINT", -2),
        ],
    )
    assert [c.status for c in fine.verdict.checks] == ["pass"]
    assert int(exit_code_for(fine)) == 0


def test_a_script_measured_while_other_programs_ran_is_marked_contaminated(
    tmp_path: Path,
) -> None:
    """The window each process was measured in goes into the run's CPU account (the
    script's own processes are mlb's tree, the rest is other programs'), like every other
    throughput path: above the limit the result warns, and `mlb compare` says so."""
    from mlbaseline.comparison import compare_results
    from mlbaseline.measure.clock import ManualClock

    (tmp_path / "fast.yaml").write_text(FAST)
    cfg = resolve(tmp_path / "fast.yaml")
    sink = attach_child.MeasureSink(cfg, lambda e: None, tmp_path / "r.json", {})
    for step in _steps(200):
        sink.on_step(step)
        if sink.done:
            break
    result = load_result(tmp_path / "r.json", ["throughput"])
    clock = ManualClock()
    busy = {"s": 0.0}  # other programs take 1.5 cores while the process is measured
    account = attach.script_account(cfg)
    account.clock, account.busy, account.own = clock, lambda: busy["s"], lambda: 0.0
    account.loadavg = lambda: (2.0,) * 3
    window = attach._Measured(account, "process 1", lambda kind: None)
    clock.advance(5.0)  # the script's imports and warm-up: before its window
    busy["s"] += 5.0
    window("measuring")
    clock.advance(2.0)
    busy["s"] += 3.0
    window.done()
    meta = {"command": ["python", "t.py"], "then": "stop"}
    outcome = attach.ChildOutcome(result, "stopped by SIGINT (exit code -2)", -2)
    pooled = attach._pooled(cfg, [outcome], None, meta, account)
    block = pooled.data["contamination"]
    assert block["contaminated"] and block["worst_phase"] == "process 1"
    assert block["max_foreign_cores"] == pytest.approx(1.5)
    (warning,) = [w for w in pooled.warnings if w["code"] == "contaminated"]
    assert "mlb ab --attach" in warning["message"]
    # the report's signal names what measured it and gives that path's advice
    from mlbaseline.report.signals import contamination_signals

    (signal,) = contamination_signals([pooled])
    assert signal.fired and signal.subject == "attach", signal
    assert signal.message.startswith("attach: other programs used up to 1.50 cores")
    assert signal.message.endswith("compare two versions with `mlb ab --attach`")
    assert (
        signal.advice == "rerun on a quiet machine, or compare two versions with `mlb ab --attach`"
    )
    comparison = compare_results(pooled, pooled, cfg.compare, same_input=True)
    assert any(w["code"] == "contaminated_input" for w in comparison.warnings)


@pytest.mark.parametrize(
    ("command", "name"),
    [
        (["torchrun", "--nproc-per-node", "2", "train.py"], "torchrun"),
        (["/opt/venv/bin/torchrun", "train.py"], "torchrun"),
        (["python", "-m", "torch.distributed.run", "train.py"], "torchrun"),
        (["python3", "-m", "torch.distributed.launch", "train.py"], "torch.distributed.launch"),
        (["accelerate", "launch", "train.py"], "accelerate launch"),
        (["python", "-m", "accelerate.commands.launch", "train.py"], "accelerate launch"),
        (["deepspeed", "train.py"], "deepspeed"),
    ],
)
def test_a_multi_process_launcher_is_refused_at_once(command: list[str], name: str) -> None:
    """The hooks would sit in the launcher, which never steps: refused before it starts, with
    the single-process command attach can measure (a DDP script under those variables was
    measured by hand: docs/REFERENCE.md)."""
    from typer.testing import CliRunner

    from mlbaseline.cli.app import app

    res = CliRunner().invoke(app, ["attach", "--no-history", "--", *command])
    assert res.exit_code == 2, res.output
    line = res.stderr.strip()
    assert line.startswith(f"Error: {name} runs the training in processes of its own")
    assert "mlb attach -- python train.py" in line and "WORLD_SIZE=1" in line
    assert "\n" not in line


@pytest.mark.parametrize(
    "command", [["python", "train.py"], ["python", "-m", "mypkg.train"], ["./train.sh"]]
)
def test_a_single_process_command_is_no_launcher(command: list[str]) -> None:
    attach.refuse_launcher(command)  # no error


def test_a_script_that_ends_within_its_warm_up_gives_no_result_and_says_why(
    project: Path,
) -> None:
    """Every step it ran was warm-up: no file (a result of no measured step would not
    validate), one line saying why, exit 2, and the script left to end on its own (no signal
    into its exit hooks)."""
    opts = ["-c", "fast.yaml", "--repeats", "1", "-o", "out/a.json", "--no-history"]
    run = _mlb(project, "attach", *opts, "--", sys.executable, "train.py", "2")
    assert run.returncode == 2, run.stderr
    assert "all of them warm-up: none was measured; let it run longer" in run.stderr
    assert "(exited with code 0)" in run.stderr
    assert "KeyboardInterrupt" not in run.stderr and "Traceback" not in run.stderr
    assert run.stdout == "script: starting\nscript: trained 2 steps\n"
    assert not (project / "out").exists()
