"""`mlb throughput` core: stage-decomposed training throughput and inference throughput over a
batch-size sweep, with telemetry; multi-process (`nproc`) and fresh-process replicates
(`repeats`) are delegated and pooled into the same result shape.

Per training step (one `TrainStep` call): data wait (blocked in the loader iterator's `next`),
host→device copy, forward, loss, backward, gradient sync (multi-process only), optimizer step
(`optimizer.step()` + `optimizer.zero_grad()`), and the step's own total; residual = total − sum
of stages, per step. Inference: forward only under `torch.inference_mode()`, timed with
`torch.utils.benchmark.Timer.blocked_autorange`.

Metrics (see the metric-naming rules): group `train.bs{B}` → `.step` (total), `.data_wait`,
`.h2d`, `.forward`, `.loss`, `.backward`, [`.grad_sync`], `.optimizer`, `.residual`,
`.samples_per_s`; DDP's overlapped mode adds the group `train.bs{B}.ddp`; inference: group
`infer.bs{B}` → `.batch`, `.samples_per_s`. Per batch size, `result.data["batch_sizes"][str(B)]`
holds the status ("ok", "oom", "error", "interrupted"), `stop_reason`, and "train" / "inference"
summaries (samples/s with a bootstrap CI of the median, step time, stage shares, residual
share, peak memory).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mlbaseline import scratch, stats
from mlbaseline.comparison.noise import result_noise
from mlbaseline.config import CompareConfig, Config, build
from mlbaseline.envinfo import fingerprint
from mlbaseline.errors import ExitCode, HardwareUnavailableError, MlbError, UsageError
from mlbaseline.measure.allocator import tune as tune_malloc
from mlbaseline.measure.clock import Clock, PerfClock
from mlbaseline.measure.contamination import CpuAccount
from mlbaseline.measure.contamination import record as record_contamination
from mlbaseline.measure.control import ControlKernel, make_control
from mlbaseline.measure.determinism import resolve_device, set_determinism
from mlbaseline.measure.energy import EnergyMeter, open_meter, pooled_block
from mlbaseline.measure.gpu import GpuProbe, default_probe
from mlbaseline.measure.memory import refuse_oversized_batches
from mlbaseline.measure.pooling import pool_replicates
from mlbaseline.measure.step import DIST_STAGES, TRAIN_STAGES, free_memory
from mlbaseline.measure.telemetry import TelemetrySampler
from mlbaseline.measure.timers import make_timer
from mlbaseline.measure.trace import trace_session
from mlbaseline.progress import NullProgress, Progress, Task
from mlbaseline.results import Check, Metric, Result
from mlbaseline.runners.children import (  # re-exported: they lived here first
    CHILD_PREFIX,
    ChildRun,
    child_command,
    run_child,
    write_child_config,
)
from mlbaseline.runners.forkserver import launcher
from mlbaseline.runners.replicate_plan import (
    Plan,
    decide,
    message,
    over_budget,
    plan_for,
    total_medians,
)
from mlbaseline.runners.sweep import (
    SweepState,
    infer_one_size,
    train_one_size,
)
from mlbaseline.runners.throughput_records import (
    Ending,
    Records,
    RunFacts,
    SizeRecord,
    Telemetry,
    check_payload,
)
from mlbaseline.workloads.factory import build_dataset

RESIDUAL_LIMIT = 0.05  # stage sums within 5% of the step time
TELEMETRY_OVERHEAD_LIMIT = 0.02


def _guard(run: SweepState, batch_size: int, part: str, fn: Callable[[], Any]) -> Any:
    """Run one part of one batch size; an OOM or a crash there is recorded and the sweep goes
    on. Bad input (MlbError) and Ctrl-C propagate."""
    try:
        return fn()
    except (MlbError, KeyboardInterrupt):
        raise
    except Exception as exc:
        run.failed(batch_size, part, exc)
    free_memory()  # after the except block: the traceback no longer pins the tensors
    return None


@dataclass
class _Watch:
    """What watches the machine during a run (issue 15 item 5): the control kernel, timed
    between measured steps (None when throughput.control_every is 0), and the CPU account of
    each phase (foreign CPU share, load)."""

    control: ControlKernel | None
    account: CpuAccount
    energy: EnergyMeter | None = None  # J/step per window of measured steps (measure.energy)

    @classmethod
    def of(cls, cfg: Config, clock: Clock) -> _Watch:
        t = cfg.throughput
        return cls(make_control(t.control_every, clock), CpuAccount(t.contamination_cores))

    def control_metric(self) -> Metric | None:
        """The control kernel's timings between measured steps (None: none were taken)."""
        if self.control is not None and self.control.samples:
            return self.control.metric()
        return None


def _train_local(run: SweepState, batch_size: int, watch: _Watch | None = None) -> None:
    control = watch.control if watch is not None else None
    energy = watch.energy if watch is not None else None
    if energy is not None:
        energy.begin()
    with run.progress.task(f"train bs{batch_size}: warm-up", total=None) as task:
        phase = {"measuring": False}

        def on_step(n: int, measuring: bool) -> None:
            task.advance()
            if energy is not None:  # before the control kernel: read at the step's end
                energy.mark(n)
            if control is not None:
                control.on_step(n, measuring)  # between steps: outside the step timer
            if measuring and not phase["measuring"]:
                phase["measuring"] = True
                task.update(description=f"train bs{batch_size}: measuring")

        tr = _guard(
            run,
            batch_size,
            "train",
            lambda: train_one_size(
                run.cfg, run.spec, batch_size, run.device, None, run.clock, on_step,
                tracer=run.trace.tracer(batch_size) if run.trace else None,
            ),
        )  # fmt: skip
    if tr is not None:
        run.add_train(tr)
        if energy is not None:
            samples = [r.samples for r in tr.loop.records]
            for m in energy.end(tr.prefix, batch_size, tr.loop.warmup, samples):
                run.records.add_metric(m)
        if run.trace is not None:  # --trace: compared with mlb's stages when assembled
            run.records.traced.append((batch_size, list(tr.stages)))
        if tr.loop.stop_reason == "interrupted":
            raise KeyboardInterrupt


def _infer_local(run: SweepState, batch_size: int) -> None:
    with run.progress.task(f"inference bs{batch_size}", total=None) as task:
        ir = _guard(
            run,
            batch_size,
            "inference",
            lambda: infer_one_size(
                run.cfg, run.spec, batch_size, run.device, run.clock, lambda *_: task.advance()
            ),
        )
    if ir is not None:
        run.add_infer(ir)


def _sweep(
    run: SweepState,
    train: bool,
    infer: bool,
    tele: TelemetrySampler | None = None,
    watch: _Watch | None = None,
) -> None:
    phase = watch.account.phase if watch is not None else lambda _: contextlib.nullcontext()
    for batch_size in run.cfg.throughput.batch_sizes:
        size = run.size(batch_size)
        if train:
            with _telemetry_window(size, "train", tele), phase(f"train.bs{batch_size}"):
                _train_local(run, batch_size, watch)
        if infer:
            with _telemetry_window(size, "inference", tele), phase(f"infer.bs{batch_size}"):
                _infer_local(run, batch_size)


@contextlib.contextmanager
def _telemetry_window(size: SizeRecord, part: str, tele: TelemetrySampler | None) -> Iterator[None]:
    """Record [start, end] of one part on the sampler's `t_s` clock, so the report can tell
    this batch size's GPU kernel-active share from the rest of the timeline."""
    start = tele.elapsed_s() if tele is not None else None
    try:
        yield
    finally:
        info = size.parts.get(part)
        if tele is not None and start is not None and isinstance(info, dict):
            info["telemetry_window_s"] = [start, tele.elapsed_s()]


# ---------------------------------------------------------------- verdict and warnings


def finish_result(result: Result) -> None:
    """The checks, stability warnings and overall status every throughput result gets (local,
    multi-process, pooled, and the library API's `Baseline`), from the data."""
    entries = result.data.get("batch_sizes", {})
    tolerance = result.config.get("throughput", {}).get("stability_tolerance")
    for key, entry in entries.items():
        for part in ("train", "train_ddp", "inference"):
            info = entry.get(part)
            if not isinstance(info, dict):
                continue
            name = f"{'infer' if part == 'inference' else part.replace('_', '.')}.bs{key}"
            if info.get("status") in ("oom", "error"):
                result.verdict.checks.append(
                    Check(f"{name}.run", "warn", info["status"], None, info.get("error", ""))
                )
                continue
            if part != "inference":
                _train_checks(result, name, info, tolerance)
    for metric in result.measurements.values():
        if metric.meta.get("role") == "total" and len(metric.values) >= 2:
            for w in stats.stability_warnings(metric.values, metric.name):
                result.warn(
                    w.code, w.message, metric=w.metric, value=w.value, threshold=w.threshold
                )
    if any(m.replicate for m in result.measurements.values()):
        # variance components and MDE per metric, recomputable from the raw values (issue 15)
        compare = build(CompareConfig, result.config.get("compare") or {}, "compare")
        result.data["noise"] = result_noise(result, compare)
    done = [e for e in entries.values() if e.get("status") in ("ok", "interrupted")]
    if entries and not done and result.status == "complete":
        result.mark("failed", "no batch size could be measured")


def _train_checks(result: Result, name: str, info: dict[str, Any], tolerance: Any) -> None:
    reason = info.get("stop_reason")
    reasons = info.get("stop_reasons")
    stable = reason == "stable" if not reasons else all(r == "stable" for r in reasons)
    msg = (
        ""
        if stable
        else (
            f"stopped by {reason} before the last windows agreed within {tolerance}; "
            "raise throughput.max_time_s / max_steps or quiet the machine"
        )
    )
    result.verdict.checks.append(
        Check(f"{name}.stop_rule", "pass" if stable else "warn", reason, tolerance, msg)
    )
    share = info.get("residual_share")
    if share is not None:
        ok = abs(share) <= RESIDUAL_LIMIT
        result.verdict.checks.append(
            Check(
                f"{name}.residual",
                "pass" if ok else "warn",
                share,
                RESIDUAL_LIMIT,
                ""
                if ok
                else "stages do not add up to the step: time is spent outside them "
                "(Python glue, hooks, the machine being busy)",
            )
        )
    if info.get("warmup_capped"):
        steps = info.get("warmup_steps")
        by = "throughput.max_time_s ended it" if reason == "max_time" else "throughput.warmup_max"
        result.warn(
            "warmup_capped",
            f"{name}: warm-up did not settle (cut after {steps} steps: {by}); measured anyway",
            metric=f"{name}.step",
        )


# ---------------------------------------------------------------- telemetry


def telemetry_block(
    result: Result, sampler: TelemetrySampler, csv_name: str | None, owned: bool
) -> None:
    """The telemetry block (and its warnings) every throughput result gets (runner and API)."""
    overhead = sampler.overhead()
    data: dict[str, Any] = {
        "interval_s": sampler.interval_s,
        "overhead": overhead,
        "summary": sampler.summary(),
        "columns": sampler.columns,
        "owned": owned,
    }
    if owned and csv_name is not None and sampler.csv_error is None:
        result.artifacts["telemetry"] = csv_name
        data["csv"] = csv_name
    else:
        data["csv"] = None
        data["stored"] = (
            f"not written ({sampler.csv_error})"
            if sampler.csv_error
            else "in memory only: no output path was given (use -o to keep the CSV)"
            if owned
            else "by the caller's sampler"
        )
        if sampler.csv_error:
            result.warn("telemetry_csv", f"telemetry CSV not written: {sampler.csv_error}")
    if sampler.gaps:
        result.warn(
            "telemetry_gaps",
            f"telemetry: {sampler.gaps} of {len(sampler.rows)} samples have gaps (failed reads; "
            "see the error column)",
            gaps=sampler.gaps,
        )
    # the CPU share is what the sampler takes from the measured code; its wall time also
    # counts the waits for the GIL while the measured code runs
    if overhead["cpu_overhead_fraction"] > TELEMETRY_OVERHEAD_LIMIT:
        result.warn(
            "telemetry_overhead",
            f"telemetry sampler used {overhead['cpu_overhead_fraction']:.1%} of a core "
            f"(> {TELEMETRY_OVERHEAD_LIMIT:.0%}); raise golden.telemetry_interval_s",
            value=overhead["cpu_overhead_fraction"],
        )
    result.data["telemetry"] = data


def make_sampler(probe: GpuProbe, cfg: Config, csv_path: Path | None = None) -> TelemetrySampler:
    """The one place a telemetry sampler is built: `mlb run`'s (for the whole run, handed down
    to each phase) or one throughput call's own."""
    return TelemetrySampler(probe, cfg.golden.telemetry_interval_s, csv_path=csv_path)


def _sampler_for(
    cfg: Config,
    probe: GpuProbe,
    sampler: TelemetrySampler | None,
    output_dir: Path | None,
    telemetry_name: str,
) -> tuple[TelemetrySampler | None, bool, Path | None]:
    """(the sampler to record into, whether this call owns it, its CSV path): the caller's
    sampler when given one; else a new one when telemetry is on."""
    owned = sampler is None and cfg.throughput.telemetry
    csv_path = output_dir / telemetry_name if owned and output_dir is not None else None
    tele = make_sampler(probe, cfg, csv_path) if owned else sampler
    return tele, owned, csv_path


# ---------------------------------------------------------------- entry points


def run_throughput(
    cfg: Config,
    progress: Progress | None = None,
    probe: GpuProbe | None = None,
    output_dir: Path | None = None,
    clock: Clock | None = None,
    *,
    telemetry_name: str = "telemetry.csv",
    sampler: TelemetrySampler | None = None,
) -> Result:
    """Measure training and/or inference throughput over `cfg.throughput.batch_sizes`.

    `output_dir`: where the telemetry CSV (`telemetry_name`) is written, beside the result JSON;
    None keeps the timeline in memory. `sampler`: a caller-owned, already running sampler
    (mlb run's, for the whole run); then none is started here. Ctrl-C returns the result so
    far, marked `interrupted`. Bad config raises MlbError; OOM/crash at one size is recorded."""
    from mlbaseline.runners.distributed import check_torchrun, torchrun_env

    check_torchrun(cfg, torchrun_env())  # under torchrun: no second launcher, no replicates
    progress = progress or NullProgress()
    own_probe = probe is None
    probe = probe or default_probe()
    try:
        n, _, single_why = plan_for(cfg.throughput, torchrun_env() is not None)
        if n > 1:
            return run_replicates(cfg, progress, probe, output_dir, telemetry_name, sampler)
        single = {"stop": "single", "reason": single_why} if single_why else None
        return _run_once(cfg, progress, probe, output_dir, clock, telemetry_name, sampler, single)
    finally:
        if own_probe:
            probe.close()


def _prepare(cfg: Config, probe: GpuProbe) -> Records:
    """The run-wide facts, known before the first step (the device checked and set up)."""
    t, w = cfg.throughput, cfg.workload
    device = resolve_device(w.device)
    if t.nproc > 1 and device.startswith("cuda") and torch.cuda.device_count() < t.nproc:
        raise HardwareUnavailableError(
            f"throughput.nproc: {t.nproc} processes need {t.nproc} GPUs; "
            f"{torch.cuda.device_count()} visible"
        )
    refuse_oversized_batches(cfg, "throughput.batch_sizes", list(t.batch_sizes), device)
    if w.threads:
        torch.set_num_threads(w.threads)
    allocator = tune_malloc(w.malloc_tuning)
    flags = set_determinism(cfg.golden.seed, w.deterministic, w.cudnn_benchmark)
    environment = fingerprint(cfg.to_dict(), probe, device)
    environment["informational"]["determinism"] = flags
    environment["informational"]["malloc_tuning"] = allocator["malloc_tuning"]
    facts = RunFacts(
        config=cfg.to_dict(),
        environment=environment,
        device=device,
        mode=t.mode,
        nproc=t.nproc,
        repeats=t.repeats,
        determinism=flags,
        allocator=allocator,
        timer=make_timer(device).kind,
        torch_threads=torch.get_num_threads(),
        stages=list(DIST_STAGES if t.nproc > 1 else TRAIN_STAGES),
        residual_limit=RESIDUAL_LIMIT,
    )
    return Records(facts)


def _run_once(
    cfg: Config,
    progress: Progress,
    probe: GpuProbe,
    output_dir: Path | None,
    clock: Clock | None,
    telemetry_name: str,
    sampler: TelemetrySampler | None,
    single: dict[str, Any] | None = None,
) -> Result:
    records = _prepare(cfg, probe)
    spec = build_dataset(cfg)
    records.blocks["dataset"] = spec.description
    if spec.description.get("overlong"):
        d = spec.description
        records.note(
            "overlong_samples",
            f"{d['overlong']} of {d['len']} synthetic text samples were longer than "
            f"workload.max_length={d['max_length']} and were cut to it",
            count=d["overlong"],
            max_length=d["max_length"],
        )
    run = SweepState(cfg, records.facts.device, records, spec, progress, clock or PerfClock())
    watch = _Watch.of(cfg, run.clock)
    tele, owned, csv_path = _sampler_for(cfg, probe, sampler, output_dir, telemetry_name)
    run.trace = trace_session(cfg, run.device, tele, output_dir, telemetry_name)
    watch.energy = open_meter(run.device, probe, tele)
    try:
        with tele if owned else contextlib.nullcontext():
            _measure(run, tele, watch)
    except MlbError:
        # bad input (a model factory that fails, say) writes nothing: not even the telemetry
        # CSV opened beside the result, which would also block the rerun without --force
        if csv_path is not None and tele is not None:
            tele.discard_csv()
        raise
    except KeyboardInterrupt:
        records.fault("interrupted", "Ctrl-C: the result holds what was measured until then")
        for size in records.sizes.values():
            if size.stop_reason is None:
                size.stop_reason = "interrupted"
    if single is not None:
        records.blocks["replicate_plan"] = single
    records.blocks["energy"] = watch.energy.block()
    ending = Ending(
        account=watch.account,
        control=watch.control_metric(),
        trace=run.trace,
        telemetry=Telemetry(tele, telemetry_name if csv_path else None, owned),
    )
    return assemble(records, ending)


def _measure(run: SweepState, tele: TelemetrySampler | None, watch: _Watch) -> None:
    """The sweep in this process: own ranks (`nproc`), one rank of an external torchrun, or
    one process; records what it measured in `run.records`."""
    from mlbaseline.runners.distributed import torchrun_env

    t = run.cfg.throughput
    train = t.mode in ("train", "both")
    infer = t.mode in ("inference", "both")
    if t.nproc > 1 and train:
        from mlbaseline.runners.distributed import train_distributed

        with watch.account.phase("train (distributed)"):
            train_distributed(run)
        train = False
    launch = torchrun_env() if train else None
    if launch is not None:  # one rank of an external torchrun (one or many nodes)
        from mlbaseline.runners.distributed import train_torchrun

        infer = train_torchrun(run, launch) and infer  # inference: rank 0 only
        train = False
    _sweep(run, train, infer, tele, watch)


# ---------------------------------------------------------------- the one assembly


def assemble(records: Records, ending: Ending) -> Result:
    """The one place a throughput run's result is built: from its records, then the parts
    derived from the whole run (pooled replicates, CPU account, trace comparisons, telemetry,
    checks and noise), its payload checked against its typed model once, at the end."""
    result = records.to_result()
    if ending.children is not None:
        pool_replicates(result, ending.children)
        # one account of the whole tree from here replaces each child's view of itself
        result.warnings = [w for w in result.warnings if w.get("code") != "contaminated"]
        if energy := pooled_block([c.data.get("energy") for c in ending.children]):
            result.data["energy"] = energy
    if ending.control is not None:
        result.add_metric(ending.control)
    if ending.account is not None:
        record_contamination(result, ending.account)
    if ending.trace is not None:  # --trace: the profiler's time per stage against mlb's
        for batch_size, stages in records.traced:
            ending.trace.finish(result, batch_size, stages)
    tel = ending.telemetry
    if tel.sampler is not None:
        telemetry_block(result, tel.sampler, tel.csv_name, tel.owned)
    finish_result(result)
    if ending.sittings is not None:
        ending.sittings(result)
    check_payload(result)
    return result


# ---------------------------------------------------------------- replicates


def run_replicates(
    cfg: Config,
    progress: Progress,
    probe: GpuProbe,
    output_dir: Path | None,
    telemetry_name: str = "telemetry.csv",
    sampler: TelemetrySampler | None = None,
) -> Result:
    """`repeats` child processes (`python -m mlbaseline throughput --json`: forked from a
    zygote or fresh, `throughput.replicate_start`), pooled: every value keeps its replicate
    id. One telemetry sampler here watches all of them."""
    n, plan, _ = plan_for(cfg.throughput)
    # the zygote starts first: its imports overlap this process's preparation
    with launcher(cfg.throughput, run_child) as (launch, started):
        records = _prepare(cfg, probe)
        tele, owned, csv_path = _sampler_for(cfg, probe, sampler, output_dir, telemetry_name)
        account = CpuAccount(cfg.throughput.contamination_cores)  # children are our own tree
        label = f"replicates ({started['start']} processes, {records.facts.device})"
        with (
            scratch.folder("replicates") as tmp,
            tele if owned else contextlib.nullcontext(),
            progress.task(label, total=n) as task,
        ):
            command = child_command(write_child_config(cfg, Path(tmp)))
            children = _replicates(records, plan, n, lambda: launch(command), account, task)
    records.blocks["replicate_start"] = started
    ending = Ending(
        account=account,
        telemetry=Telemetry(tele, telemetry_name if csv_path else None, owned),
        children=children,
        sittings=lambda result: _between_sittings(result, cfg, plan),
    )
    return assemble(records, ending)


def _replicates(
    records: Records,
    plan: Plan | None,
    n: int,
    run_one: Callable[[], ChildRun],
    account: CpuAccount,
    task: Task,
) -> list[Result]:
    """Up to `n` replicates, one after another, until the plan stops them, one fails or Ctrl-C
    comes (recorded as a fault); the results of those that gave one."""
    walls: list[float] = []
    children: list[Result] = []
    for r in range(n):
        start = time.perf_counter()
        with account.phase(f"replicate {r}"):
            run = run_one()
        walls.append(time.perf_counter() - start)
        doc = run.result
        if doc is None and r == 0 and run.returncode == ExitCode.BAD_INPUT:
            # bad input (a config, a model that cannot be imported) is the same in every
            # replicate: say it once, as this process would have, exit 2
            raise UsageError(run.error.removeprefix("Error: "))
        if doc is None:
            if run.interrupted:
                records.fault("interrupted", f"Ctrl-C during replicate {r}")
            else:
                records.fault("failed", f"replicate {r} produced no result: {run.error}")
            break
        children.append(doc)
        task.advance()
        if run.interrupted or doc.status == "interrupted":
            records.fault("interrupted", f"Ctrl-C during replicate {r}")
            break
        if plan is not None and _enough(records, plan, children, walls):
            break
    return children


def _between_sittings(result: Result, cfg: Config, plan: Plan | None) -> None:
    """Noise between sittings, read from the history (history.sittings; read-only); when it
    exceeds the reproducibility target, say that more replicates cannot narrow it."""
    from mlbaseline.history import sittings
    from mlbaseline.history.record import detect_git
    from mlbaseline.history.store import resolve_location

    location = resolve_location(cfg.history.store or None)
    if not sittings.attach(result, location, detect_git(), cfg.compare.alpha):
        return
    worst = sittings.worst(result)
    target = plan.target if plan is not None else cfg.throughput.repro_target
    if worst is not None and worst[1]["between_sd"] > target:
        name, sit = worst
        result.warn(
            "sitting_noise",
            f"{name}: sittings differ by ±{sit['between_sd'] * 100:.1f}% (sd) beyond their "
            f"processes ({sit['sittings']} sittings in the history), above the "
            f"±{target * 100:.1f}% target; more replicates cannot narrow that: compare two "
            "variants side by side with mlb ab",
            metric=name,
            value=sit["between_sd"],
            threshold=target,
        )


def _enough(records: Records, plan: Plan, children: list[Result], walls: list[float]) -> bool:
    """`repeats: auto`: record the plan's decision after this replicate; True to stop."""
    decision = decide(total_medians(children), walls, plan)
    if decision.stop is None:
        return False
    text = message(decision, len(children), plan, walls)
    block: dict[str, Any] = {
        **decision.to_dict(),
        "replicates": len(children),
        "target": plan.target,
        "budget_s": plan.budget_s,
        "walls_s": list(walls),
        "message": text,
    }
    if decision.stop != "target":
        records.note("repro_target", text, needed=decision.needed)
    past = over_budget(len(children), walls, plan)
    if past:
        block["over_budget"] = past
        records.note("replicates_budget", past)
    records.blocks["replicate_plan"] = block
    return True


def replicates_result(config: dict[str, Any], children: list[Result]) -> Result:
    """A throughput result pooled from fresh-process results run elsewhere (`mlb ab
    --processes`: one per arm), described by the first child's resolved config, environment
    and run data (they ran in the children, not here; `config` stands in when there is no
    child); every value keeps its replicate id."""
    result = Result(kind="throughput", config=children[0].config if children else config)
    if children:
        result.environment = children[0].environment
        result.data = {k: v for k, v in children[0].data.items() if k != "batch_sizes"}
    result.data.update(repeats=len(children), batch_sizes={})
    pool_replicates(result, children)
    finish_result(result)
    return result


__all__ = [
    "CHILD_PREFIX",
    "DIST_STAGES",
    "TRAIN_STAGES",
    "ChildRun",
    "Ending",
    "Telemetry",
    "assemble",
    "child_command",
    "finish_result",
    "make_sampler",
    "replicates_result",
    "run_child",
    "run_replicates",
    "run_throughput",
    "telemetry_block",
    "write_child_config",
]
