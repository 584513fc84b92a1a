"""Issue 26, "Shown when": `mlb attach` on five unmodified training scripts in the style of public
examples (tests/attach_scripts/: a plain DataLoader loop; accumulation + bf16 autocast + clipping
+ a scheduler; an LSTM LM with a manual SGD update and no DataLoader; a Lightning Trainer; a
Hugging Face Trainer).

For each script, through the real CLI in a subprocess: the stages add up to the step within 2%
(the residual is in the result and closes the sum exactly); a known busy-wait put in one stage is
attributed to that stage within ±2% (bench `accuracy`'s measure, here as a difference: the
stage's lower quartile with the busy-wait minus without it, against the busy-wait's length,
since each stage also does real work); the script's own stdout, stderr and exit code are what
it gives run plainly; the result goes through `mlb compare`, `mlb report` and the history.

Each script is run plainly, attached with `--then continue` (measured, then left to finish: its
whole output and exit code), and attached once per busy-wait under the default `--then stop`,
shared by every assertion through a module-scoped fixture.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.measure.contamination import CpuAccount
from mlbaseline.results import Result, load_result

pytestmark = pytest.mark.slow  # real subprocesses: three runs of each script

SCRIPTS = Path(__file__).resolve().parent / "attach_scripts"
TOLERANCE = 0.02  # bench `accuracy`'s: within ±2%
EXIT = 3  # the scripts' exit code under test (MLB_TEST_EXIT): not 0, not an mlb code's meaning
TIMEOUT_S = 240  # a run that hangs fails the test instead of the suite
# a short stop rule: enough measured steps for a median, few enough for a quick test
FAST = """\
throughput:
  min_time_s: 0.2
  min_steps: 32
  max_steps: 40
  max_time_s: 20
  window: 8
  warmup_min: 3
  warmup_max: 20
  repeats: 1
"""


@dataclass(frozen=True)
class Busy:
    seconds: float  # each time the script passes there
    per_step: int = 1  # times per optimizer step (micro-batches, for a loss busy-wait)


@dataclass(frozen=True)
class Case:
    script: str
    busy: dict[str, Busy]  # stage -> the busy-wait put there (each in a run of its own)
    needs: str | None = None  # an optional package the script imports


# Busy-waits in stages whose own work is small beside them (bench `accuracy` puts nothing else in
# a stage): a stage's own work varies from step to step and runs slower after a long spin (caches
# cooled by the machine's other programs: 0.8 ms of MLP took +27% after a 10 ms spin, +63% after
# 20 ms, here), so a heavy stage would blur the ±2%. Each spin sits at its stage's very end, so
# that the work it slows is the next stage's (_knobs.busy), and each has a run of its own: a spin
# in the same step would slow another stage's own work on its "with" steps only (lm_manual's
# update after its backward's spin: +4%). Together they cover data wait, loss,
# backward and optimizer, and the step boundary each way: an optimizer step, accumulation, a
# manual update (the small LM, whose backward is light), Lightning's closure inside
# optimizer.step, the HF Trainer. The scripts offer more (forward; Lightning's backward), unused
# here for that reason.
# Code that runs after a spin inside the spin's own stage runs cooled too: the DataLoader's
# bookkeeping after the collate function and mlb's hook at `__next__`'s end (0.10-0.17 ms more
# on the steps with a 10 ms spin with no mlb at all, the DataLoader alone; 0.11-0.27 ms
# attached), the HF Trainer's code from the loss to backward (0.10-0.26 ms). Against 10 ms that
# is up to +2.7% of the median (CI: +2.7%). It grows more slowly than the spin up to about 20 ms
# (0.13-0.3 ms) and faster beyond (30 ms: up to 0.8 ms), so those two spin 20 ms; and since it
# only ever adds time, the tests judge the lower quartile (below).
CASES = {
    "plain": Case("plain.py", {"data_wait": Busy(0.020)}),
    "accum_amp": Case("accum_amp.py", {"loss": Busy(0.0025, per_step=4)}),
    "lm_manual": Case("lm_manual.py", {"optimizer": Busy(0.010), "backward": Busy(0.010)}),
    "lightning": Case(
        "lightning_tiny.py",
        {"loss": Busy(0.010)},
        needs="pytorch_lightning",
    ),
    "hf_trainer": Case("hf_trainer.py", {"loss": Busy(0.020)}, needs="transformers"),
}
MAX_BUSY = max(len(case.busy) for case in CASES.values())


@dataclass(frozen=True)
class Proc:
    rc: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Runs:
    name: str
    case: Case
    plain: Proc
    attached: Proc  # --then continue, no busy-wait
    busy: dict[str, Proc]  # stage -> its busy run (default --then stop)
    paths: dict[str, Path]  # "base" or a busy stage -> its result file
    spins: dict[str, list[float]]  # stage -> the busy-waits' actual lengths, in order
    load: dict[str, dict[str, Any]]  # "base" or a stage -> foreign CPU meanwhile (contamination)

    def result(self, which: str) -> Result:
        """`which`: "base" (the --then continue run) or a busy stage (its run)."""
        path, proc = self.paths[which], self.attached if which == "base" else self.busy[which]
        assert path.is_file(), f"{self.name}: no result (exit {proc.rc})\n{proc.stderr[-3000:]}"
        return load_result(path, ["throughput"])

    def truth_s(self, stage: str) -> float:
        """The busy-wait's median length per optimizer step, as it really spun."""
        per_step, spins = self.case.busy[stage].per_step, self.spins[stage]
        steps = [
            sum(spins[i : i + per_step]) for i in range(0, len(spins) - per_step + 1, per_step)
        ]
        return float(np.median(steps))


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLB_TEST_")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env.update(extra)
    return env


def _run(cmd: list[str], cwd: Path, **extra: str) -> Proc:
    done = subprocess.run(
        cmd, cwd=cwd, env=_env(**extra), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    return Proc(done.returncode, done.stdout, done.stderr)


def _attach(out: Path, name: str, config: Path, script: Path, *options: str) -> list[str]:
    mlb = [sys.executable, "-m", "mlbaseline", "attach", "-c", str(config), "-o", str(out)]
    return [*mlb, "--name", name, *options, "--", sys.executable, str(script)]


def _spins(log: Path) -> dict[str, list[float]]:
    spins: dict[str, list[float]] = {}
    for line in log.read_text(encoding="utf-8").splitlines():
        stage, seconds = line.split()
        spins.setdefault(stage, []).append(float(seconds))
    return spins


@pytest.fixture(scope="module", params=list(CASES), ids=list(CASES))
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """The script run plainly, attached with --then continue, attached with each busy-wait."""
    name, case = request.param, CASES[request.param]
    if case.needs:
        pytest.importorskip(case.needs)
    tmp = tmp_path_factory.mktemp(f"attach-{name}")
    config = tmp / "fast.yaml"
    config.write_text(FAST, encoding="utf-8")
    script = SCRIPTS / case.script
    plain = _run([sys.executable, str(script)], tmp, MLB_TEST_EXIT=str(EXIT))
    assert plain.rc == EXIT, plain.stderr[-3000:]
    paths = {which: tmp / f"{which}.json" for which in ("base", *case.busy)}
    # mlb's own default (throughput.contamination_cores): above it, other programs' time shows
    accounts = {which: CpuAccount(threshold_cores=0.25) for which in paths}
    with accounts["base"].phase(f"the attached run of {name}"):
        attached = _run(
            _attach(paths["base"], f"attach-{name}", config, script, "--then", "continue"),
            tmp,
            MLB_TEST_EXIT=str(EXIT),
        )
    busy_runs: dict[str, Proc] = {}
    spins: dict[str, list[float]] = {}
    for stage, b in case.busy.items():
        log = tmp / f"spins-{stage}.txt"
        with accounts[stage].phase(f"the {stage} busy run of {name}"):
            busy_runs[stage] = _run(
                _attach(paths[stage], f"attach-{name}-busy-{stage}", config, script),
                tmp,
                MLB_TEST_BUSY=f"{stage}:{b.seconds}:{b.per_step}",
                MLB_TEST_BUSY_LOG=str(log),
            )
        spins.update(_spins(log) if log.is_file() else {})
    load = {which: account.to_dict() for which, account in accounts.items()}
    return Runs(name, case, plain, attached, busy_runs, paths, spins, load)


def _group(result: Result) -> str:
    """The result's one training group, `train.bs{B}` (B: the samples per micro-batch seen)."""
    groups = {n.rsplit(".", 1)[0] for n in result.measurements if n.endswith(".step")}
    groups = {g for g in groups if g.startswith("train.bs")}
    assert len(groups) == 1, sorted(result.measurements)
    return groups.pop()


def _values(result: Result, metric: str) -> np.ndarray:
    return np.asarray(result.measurements[metric].values, dtype=float)


def _stages(result: Result) -> list[str]:
    stages = list(result.data["stages"])
    assert "residual" not in stages
    return stages


# ------------------------------------------------------------------ the script is unchanged


def test_the_scripts_output_and_exit_code_are_unchanged(runs: Runs) -> None:
    """--then continue: the script trains to its end as if run plainly; stdout is the script's
    alone (identical), its stderr lines all pass through in order, its exit code comes back."""
    attached, plain = runs.attached, runs.plain
    assert "TRAINING DONE" in plain.stdout
    assert attached.stdout == plain.stdout, attached.stderr[-3000:]
    lines = iter(attached.stderr.splitlines())
    missing = [ln for ln in plain.stderr.splitlines() if ln.strip() and ln not in lines]
    assert not missing, attached.stderr[-3000:]
    attach = runs.result("base").data["attach"]
    assert attach["then"] == "continue" and attach["exit_codes"] == [EXIT], attach
    assert f"exit code {EXIT}" in attach["ended"], attach


def test_a_stopped_script_printed_only_its_own_lines(runs: Runs) -> None:
    """Default --then stop: the script is stopped once measured; what it printed until then is
    the start of its plain output, with nothing of mlb's on stdout."""
    for stage, busy in runs.busy.items():
        assert busy.rc == 0, busy.stderr[-3000:]
        printed = busy.stdout.splitlines()
        assert printed == runs.plain.stdout.splitlines()[: len(printed)]
        assert runs.result(stage).data["attach"]["then"] == "stop"


# ------------------------------------------------------------------ stages add up, busy-wait found


def test_the_stages_add_up_to_the_step(runs: Runs) -> None:
    """Each measured step is its stages plus the residual (shown in the result, never folded
    in), and a step's stages leave at most 2% of it to the residual (the median step: an epoch
    boundary's iterator set-up or another program's time slice makes single steps' residuals,
    which the time-weighted share in the message and mlb's own report signal show)."""
    for which in ("base", *runs.case.busy):
        result = runs.result(which)
        group = _group(result)
        step = _values(result, f"{group}.step")
        stages = sum(_values(result, f"{group}.{s}") for s in _stages(result))
        residual = _values(result, f"{group}.residual")
        assert len(step) >= 32
        np.testing.assert_allclose(stages + residual, step, rtol=1e-6, atol=1e-7)
        share = float(np.median(np.abs(residual) / step))
        weighted = abs(residual.sum()) / step.sum()
        seen = (
            f"{runs.name} ({which}): residual {share:.1%} of the median step "
            f"({weighted:.1%} of the time)"
        )
        _skip_if_busy_machine(share > TOLERANCE, runs.load[which], seen)
        assert share <= TOLERANCE, seen


def _with_and_without(values: np.ndarray, busy_s: float) -> tuple[np.ndarray, np.ndarray]:
    """The measured steps without the busy-wait and with it (every other step has it): a spin
    lasts at least `busy_s`, so the steps with it are those at least half of it above the
    fastest step (a stage's own work varies by more than the widest gap between values)."""
    cut = values.min() + busy_s / 2
    return values[values < cut], values[values >= cut]


@pytest.mark.parametrize("slot", range(MAX_BUSY), ids=[f"busy{i}" for i in range(MAX_BUSY)])
def test_a_known_busy_wait_is_attributed_to_its_stage(runs: Runs, slot: int) -> None:
    """The stage's lower quartile per step with the busy-wait minus its lower quartile without
    is the busy-wait as it really spun, within ±2% (bench `accuracy`'s tolerance). With and
    without are every other step of one run, so that both see the same process and the same
    machine load. The lower quartile, not the median: the code after a spin runs cooled and
    other programs' time slices land in any step, both only ever adding time (above CASES: up
    to +2.4% of a 10 ms spin in the median, +1.5% in the lower quartile, on the same runs);
    time that mlb put in the wrong stage would move the whole distribution, the quartile too. That
    the busy-wait lands in this stage is asserted always; the ±2% is judged only where the
    machine was the run's own: where other programs used more than 0.25 cores meanwhile (mlb's
    own contamination measure), a miss is a skip that shows the numbers, never a pass."""
    stages = list(runs.case.busy)
    if slot >= len(stages):
        pytest.skip(f"{runs.name} has {len(stages)} busy-wait(s)")
    stage = stages[slot]
    result = runs.result(stage)
    group = _group(result)
    assert stage in _stages(result)
    busy = runs.case.busy[stage]
    values = _values(result, f"{group}.{stage}")
    without, with_busy = _with_and_without(values, busy.seconds * busy.per_step)
    n = len(without) + len(with_busy)
    added = float(np.percentile(with_busy, 25) - np.percentile(without, 25))
    truth = runs.truth_s(stage)
    error = added / truth - 1
    seen = (
        f"{runs.name}: {stage} {added * 1e3:.3f} ms more (lower quartiles) on "
        f"{len(with_busy)} of {n} steps for a {truth * 1e3:.3f} ms busy-wait ({error:+.1%})"
    )
    # the busy-wait is in this stage at all, on about every other step (load cannot do that)
    assert min(len(without), len(with_busy)) >= n / 4 and abs(error) < 0.5, seen
    _skip_if_busy_machine(abs(error) > TOLERANCE, runs.load[stage], seen)
    assert abs(error) <= TOLERANCE, seen


def _skip_if_busy_machine(missed: bool, load: dict[str, Any], seen: str) -> None:
    """A ±2% timing check missed while other programs used more than 0.25 cores (mlb's own
    contamination measure): their time slices land in any stage or the residual and a spin
    can overrun, so the miss says nothing about mlb; it is a skip that shows the numbers, never
    a pass. On a machine of its own the check is judged."""
    if missed and load["contaminated"]:
        cores = load["max_foreign_cores"]
        pytest.skip(f"{seen}: not judged, other programs used {cores:.2f} cores meanwhile")


# ------------------------------------------------------------------ compare, report, history

cli = CliRunner()


def _mlb(*args: Any) -> Any:
    return cli.invoke(app, [str(a) for a in args])


def test_the_result_goes_through_compare(runs: Runs) -> None:
    """`mlb compare` reads two attach results of the script, finds them comparable, shows the
    residual beside the stages, and its attribution gives the busy stage's change by the
    medians of the two files. (Only every other step has the spin, so a file's median of that
    stage sits at the edge of its two halves and, between runs under drift, may even fall:
    that the spin is attributed to its stage is the with/without test's, above.)"""
    base = runs.result("base")
    group = _group(base)
    for stage in runs.case.busy:
        busy = runs.result(stage)
        res = _mlb(
            "compare", runs.paths["base"], runs.paths[stage], "--json", "--quiet", "--no-history"
        )
        assert res.exit_code in (0, 1), res.stderr
        data = json.loads(res.stdout)["data"]
        assert data["comparable"], data.get("blocking_differences")
        names = {m["metric"] for m in data["metrics"]}
        assert {f"{group}.step", f"{group}.{stage}"} <= names
        (attribution,) = [a for a in data["attribution"] if a["group"] == group]
        assert attribution["residual"] is not None  # the residual is shown, not folded in
        shown = {s["stage"]: s for s in attribution["stages"]}
        old, new = (float(np.median(_values(r, f"{group}.{stage}"))) for r in (base, busy))
        assert shown[stage]["median_old"] == pytest.approx(old, rel=1e-6)
        assert shown[stage]["median_new"] == pytest.approx(new, rel=1e-6)
        assert shown[stage]["delta"] == pytest.approx(new - old, rel=1e-6), shown[stage]


def test_the_result_goes_through_report(runs: Runs, tmp_path: Path) -> None:
    out = tmp_path / "report"
    res = _mlb("report", runs.paths["base"], "-o", out, "--quiet")
    assert res.exit_code == 0, res.stderr
    text = (out / "baseline_report.md").read_text(encoding="utf-8")
    breakdown = text.split("## Training stage breakdown", 1)[1].split("\n## ", 1)[0]
    header = next(line for line in breakdown.splitlines() if line.startswith("| batch size"))
    for stage in (*_stages(runs.result("base")), "residual"):
        assert f"| {stage.replace('_', ' ')} |" in header, header


def test_the_result_is_in_the_history(runs: Runs) -> None:
    res = _mlb("history", "list", "--json", "--name", f"attach-{runs.name}")
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)
    assert len(rows) == 1 and rows[0]["kind"] == "throughput", rows
