"""`mlb run`: the whole baseline in one go.

env-check → (subset, when a dataset is configured) → dataloader → throughput (training and
inference) → latency → report, into one folder: every phase's result JSON, the telemetry CSV
of the whole run, a combined `baseline.json` (kind `run`) and `baseline_report.md`.

Each phase's result is written as soon as it is done, so a fault or Ctrl-C (SIGTERM, SIGHUP)
later never loses it; `baseline.json` is rewritten after every phase and marked with what
happened: `running` until the last phase is done, so a file left by a run that was killed
(SIGKILL, a full disk) never claims `complete`. The folder is locked for the whole run
(`folderlock`): a second run into it is refused before it writes anything.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlbaseline import folderlock, stopping
from mlbaseline.config import Config
from mlbaseline.errors import MlbError, OutputExistsError
from mlbaseline.measure.contamination import CpuAccount
from mlbaseline.measure.gpu import GpuProbe
from mlbaseline.progress import NullProgress, Progress
from mlbaseline.results import Check, Result, utc_now, write_result

PHASES = ("env-check", "subset", "dataloader", "throughput", "latency", "report")
FILES = {
    "env-check": "env_check.json",
    "subset": "subset.json",
    "dataloader": "dataloader.json",
    "throughput": "throughput.json",
    "latency": "latency.json",
}
BASELINE = "baseline.json"
TELEMETRY = "telemetry.csv"
SUBSET_DIR = "subset"


def default_output_dir(root: Path = Path("mlb-results")) -> Path:
    """mlb-results/<UTC timestamp>/ (sortable, no characters that need quoting)."""
    stamp = utc_now().replace(":", "").replace("-", "").split(".")[0]
    return root / f"{stamp}Z"


def check_run_dir(out_dir: Path, force: bool) -> None:
    """A non-empty output folder needs --force (checked before anything is measured)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputExistsError(f"{out_dir}: exists and is not a folder")
    taken = out_dir.is_dir() and any(not folderlock.is_lock_file(p) for p in out_dir.iterdir())
    if taken and not force:
        raise OutputExistsError(f"{out_dir}: not empty (use --force to write into it)")


@dataclass
class RunOutcome:
    baseline: Result
    out_dir: Path
    phase_results: dict[str, Result] = field(default_factory=dict)
    report_path: Path | None = None


@dataclass
class _Run:
    cfg: Config
    out_dir: Path
    probe: GpuProbe
    progress: Progress
    force: bool
    baseline: Result
    results: dict[str, Result] = field(default_factory=dict)
    account: CpuAccount | None = None  # foreign CPU share per phase, for baseline.json
    html: bool = False  # the report also as baseline_report.html (`mlb run --html`)

    def record(self, phase: str, result: Result) -> None:
        """Write the phase result, fold it into baseline.json, and save that too."""
        self.results[phase] = result
        stopping.annotate(result)
        write_result(result, self.out_dir / FILES[phase], force=True)
        _merge(self.baseline, phase, result, FILES[phase])
        self.save()

    def fail_phase(self, phase: str, message: str) -> None:
        self.baseline.data["phases"].append(
            {"phase": phase, "kind": phase, "file": None, "status": "failed", "error": message}
        )
        self.baseline.mark("failed", f"{phase}: {message}")
        self.baseline.verdict.checks.append(Check(f"{phase}.ran", "fail", message=message))
        self.save()

    def save(self, final: bool = False) -> None:
        """Write baseline.json; until the run's `final` save, one that would say `complete`
        says `running` (a reader takes a leftover `running` for an unfinished run)."""
        doc = self.baseline
        if not final and doc.status == "complete":
            doc = dataclasses.replace(doc, status="running")
        write_result(doc, self.out_dir / BASELINE, force=True)


def _merge(baseline: Result, phase: str, result: Result, file: str) -> None:
    """Fold one phase into the combined result; metric names are distinct by prefix."""
    baseline.measurements.update(result.measurements)
    baseline.data["phases"].append(
        {
            "phase": phase,
            "kind": result.kind,
            "file": file,
            "status": result.status,
            "verdict": result.verdict.status,
        }
    )
    for check in result.verdict.checks:
        baseline.verdict.checks.append(dataclasses.replace(check, name=f"{phase}/{check.name}"))
    for warning in result.warnings:
        baseline.warnings.append({**warning, "phase": phase})
    if result.environment.get("blocking") and (
        phase == "throughput" or not baseline.environment.get("blocking")
    ):
        baseline.environment = result.environment  # throughput's fingerprint is the reference
    if result.status != "complete":
        baseline.mark(result.status, f"{phase}: {'; '.join(result.notes) or result.status}")


def _downgrade_env_failures(baseline: Result) -> None:
    """--ignore-env asked to measure anyway: the env-check failures stay in the result as
    warnings (env_check.json keeps them as failures), so they no longer fail the run's exit code
    on a busy machine, while the report and the JSON still say what was wrong."""
    baseline.verdict.checks = [
        dataclasses.replace(c, status="warn", message=f"ignored (--ignore-env): {c.message}")
        if c.name.startswith("env-check/") and c.status == "fail"
        else c
        for c in baseline.verdict.checks
    ]


def _with(cfg: Config, section: str, **changes: Any) -> Config:
    return dataclasses.replace(
        cfg, **{section: dataclasses.replace(getattr(cfg, section), **changes)}
    )


def _phase_list(cfg: Config, skip: set[str]) -> list[str]:
    wanted = [p for p in PHASES if p not in skip]
    if "subset" in wanted and not cfg.subset.source:
        wanted.remove("subset")
    return wanted


def run_baseline(
    cfg: Config,
    out_dir: Path,
    probe: GpuProbe,
    progress: Progress | None = None,
    *,
    ignore_env: bool = False,
    skip: set[str] | frozenset[str] = frozenset(),
    force: bool = False,
    html: bool = False,
) -> RunOutcome:
    """Run every phase into `out_dir` and return the combined result (kind `run`); `html`:
    the report also as a self-contained `baseline_report.html`."""
    with lock_run_dir(out_dir, skip):
        check_run_dir(out_dir, force)
        return _run_locked(cfg, out_dir, probe, progress, ignore_env, skip, force, html)


def lock_run_dir(
    out_dir: Path, skip: set[str] | frozenset[str] = frozenset()
) -> AbstractContextManager[Any]:
    """The run's folder lock (`folderlock`, re-entrant in this process: `mlb run` holds it
    through the history record, `run_baseline` takes it again), after the checks that need no
    folder, so that a refused run creates none."""
    unknown = set(skip) - set(PHASES)
    if unknown:
        raise MlbError(
            f"--skip: unknown phase(s) {', '.join(sorted(unknown))}; phases: {', '.join(PHASES)}"
        )
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputExistsError(f"{out_dir}: exists and is not a folder")
    return folderlock.locked(out_dir)


def _run_locked(
    cfg: Config,
    out_dir: Path,
    probe: GpuProbe,
    progress: Progress | None,
    ignore_env: bool,
    skip: set[str] | frozenset[str],
    force: bool,
    html: bool = False,
) -> RunOutcome:
    progress = progress or NullProgress()
    baseline = Result(kind="run", config=cfg.to_dict())
    baseline.data = {"phases": [], "skipped": sorted(skip), "output_dir": str(out_dir)}
    run = _Run(cfg, out_dir, probe, progress, force, baseline, html=html)
    phases = _phase_list(cfg, set(skip))
    outcome = RunOutcome(baseline, out_dir, run.results)
    try:
        _run_phases(run, phases, ignore_env, outcome)
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM or SIGHUP (stopping.Terminated)
        baseline.mark("interrupted", stopping.note(exc))
    except BaseException as exc:  # a fault no phase caught (a full disk): never `complete`
        baseline.mark("failed", f"the run stopped: {type(exc).__name__}: {exc}")
        with contextlib.suppress(Exception):  # the disk may refuse this too: `running` stays
            run.save(final=True)
        raise
    stopping.annotate(baseline)  # a phase that caught the signal noted only "Ctrl-C"
    run.save(final=True)
    return outcome


def _run_phases(run: _Run, phases: list[str], ignore_env: bool, outcome: RunOutcome) -> None:
    from mlbaseline.runners.throughput import make_sampler

    total = len(phases)
    sampler = make_sampler(run.probe, run.cfg, csv_path=run.out_dir / TELEMETRY)
    run.baseline.artifacts["telemetry"] = TELEMETRY
    with sampler:
        for i, phase in enumerate(phases, 1):
            run.progress.log(f"[bold]phase {i}/{total}: {phase}[/bold]")
            sampler.phase = phase
            if phase == "report":
                break
            if not _run_phase(run, phase, sampler):
                return
            if phase == "env-check" and run.results[phase].verdict.failed:
                if not ignore_env:
                    run.baseline.notes.append(
                        "env-check failed: run stopped (use --ignore-env to measure anyway)"
                    )
                    return
                run.baseline.notes.append("env-check failed and was ignored (--ignore-env)")
                run.baseline.data["env_check_ignored"] = True
                _downgrade_env_failures(run.baseline)
            if run.baseline.status == "interrupted":
                return
        sampler.phase = ""
    run.baseline.data["telemetry"] = sampler.overhead()
    _input_bound(run)
    run.save()
    if "report" in phases:
        outcome.report_path = _report(run)


# Each phase: one runner call. A fault in one phase is recorded and the run goes on; Ctrl-C
# (KeyboardInterrupt, or a runner's result marked interrupted) stops it.
def _run_phase(run: _Run, phase: str, sampler: Any) -> bool:
    runner = _RUNNERS[phase]
    run.account = run.account or CpuAccount(run.cfg.throughput.contamination_cores)
    try:
        with run.account.phase(phase):
            result = runner(run, sampler)
    except MlbError as exc:
        run.fail_phase(phase, exc.message)
        return phase != "env-check"
    _account_phase(run, phase, result)
    run.record(phase, result)
    return result.status != "interrupted"


def _account_phase(run: _Run, phase: str, result: Result) -> None:
    """baseline.json's CPU account of every phase so far; a phase that has no account of its
    own (all but throughput) warns here when other programs used more than the limit."""
    assert run.account is not None
    run.baseline.data["contamination"] = run.account.to_dict()
    last = run.account.phases[-1]
    limit = run.account.threshold_cores
    if "contamination" not in result.data and last["foreign_cores"] > limit:
        result.warn(
            "contaminated",
            f"contaminated: other programs used {last['foreign_cores']:.2f} cores during "
            f"{phase} (limit {limit:g}): its figures include their load",
            value=last["foreign_cores"],
            threshold=limit,
        )


def _env_check(run: _Run, sampler: Any) -> Result:
    from mlbaseline.runners.envcheck import run_env_check

    return run_env_check(run.cfg, run.probe)


def _subset(run: _Run, sampler: Any) -> Result:
    from mlbaseline.runners.subset import run_subset

    out = run.out_dir / SUBSET_DIR
    result = run_subset(
        run.cfg,
        Path(run.cfg.subset.source or ""),
        out,
        run.progress,
        force=run.force,
        probe=run.probe,
        write_result_file=False,
    )
    if result.status == "complete":
        # later phases measure the subset, the set every later baseline runs on
        run.cfg = _with(run.cfg, "workload", dataset="imagefolder", data_dir=str(out))
        run.cfg = _with(run.cfg, "dataloader", data_dir=str(out))
    return result


def _dataloader(run: _Run, sampler: Any) -> Result:
    from mlbaseline.runners.dataloader import run_dataloader

    data_dir = run.cfg.dataloader.data_dir or run.cfg.workload.data_dir
    return run_dataloader(run.cfg, Path(data_dir) if data_dir else None, run.progress)


def _throughput(run: _Run, sampler: Any) -> Result:
    from mlbaseline.runners.throughput import run_throughput

    result = run_throughput(
        run.cfg, run.progress, run.probe, output_dir=run.out_dir, sampler=sampler
    )
    result.artifacts["telemetry"] = TELEMETRY
    return result


def _latency(run: _Run, sampler: Any) -> Result:
    from mlbaseline.runners.latency import run_latency

    return run_latency(run.cfg, run.progress)


_RUNNERS: dict[str, Callable[[_Run, Any], Result]] = {
    "env-check": _env_check,
    "subset": _subset,
    "dataloader": _dataloader,
    "throughput": _throughput,
    "latency": _latency,
}


def _input_bound(run: _Run) -> None:
    """The dataloader's input-bound verdict, from the training step's measured data wait."""
    from mlbaseline.runners.dataloader import input_bound_verdict

    thr = run.results.get("throughput")
    if thr is None:
        return
    b = run.cfg.golden.batch_size
    sizes = [b] if f"train.bs{b}.step" in thr.measurements else []
    sizes = sizes or [int(n.split(".")[1][2:]) for n in thr.measurements if n.endswith(".step")]
    if not sizes:
        return
    key = f"train.bs{sizes[0]}"
    step = sum(thr.measurements[f"{key}.step"].values)
    wait = thr.measurements.get(f"{key}.data_wait")
    if not step or wait is None:
        return
    share = sum(wait.values) / step
    level, message = input_bound_verdict(share)
    run.baseline.data["input_bound"] = {"batch": key, "share": share, "level": level}
    status = {"none": "pass", "moderate": "warn", "high": "warn"}[level]
    run.baseline.verdict.checks.append(Check("input_bound", status, share, 0.20, message))


def _report(run: _Run) -> Path | None:
    from mlbaseline.report.render import ReportInput, render_report
    from mlbaseline.runners.history import report_view

    inputs = [
        ReportInput(result, run.out_dir / FILES[phase]) for phase, result in run.results.items()
    ]
    try:
        out = render_report(
            inputs,
            run.out_dir,
            telemetry_csv=run.out_dir / TELEMETRY,
            force=True,
            progress=run.progress,
            history=report_view([run.baseline], run.cfg),  # this run's earlier comparable runs
            html=run.html,
        )
    except MlbError as exc:
        run.fail_phase("report", exc.message)
        return None
    run.baseline.artifacts["report"] = out.markdown_path.name
    run.baseline.data["phases"].append(
        {"phase": "report", "kind": "report", "file": out.markdown_path.name, "status": "complete"}
    )
    run.save()
    return out.markdown_path
