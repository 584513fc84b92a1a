"""`Baseline`: one batch size of the user's own training loop, measured by `mlb`'s core.

A step is `with bl.step():` (or `bl.begin_step()` … `bl.end_step()`), or begins at a `next()`
of `bl.data(loader)` (the data wait is its first stage) and ends when the `with bl.step():`
block after it closes; without a step block, a step ends at the `next()` after it
(`bl.data(loader, per_step=N)`: after N batches, for gradient accumulation). Inside a step
every `with bl.stage(name):` block is timed by the CLI's stage timer (`measure.timers`: CPU
clock, or CUDA events synchronized at the step's edges), and the step goes to the CLI's
`StepLoop` (`measure.loop`), which detects the warm-up and applies the stop rule: `bl.done`
says the rule is met (`Baseline(advisory=True)`: it never does, so the user's epoch is not cut;
`bl.ended` says measuring ended, and the steps after it run untimed). A stage missing from a
step counts 0 there; the residual (step − stages) is reported, as in `mlb throughput`.
`save()` writes a `throughput` result (`train.bs{B}.*`, the same checks), so `mlb compare`,
`mlb report` and the history read it like any other, and prints one summary line on stderr
(`summary_line`: the path, the steps, why they stopped, the step median with its CI;
`quiet=True` keeps it silent).

Under torch.distributed (an initialized process group), every rank measures, rank 0's
warm-up and stop decisions are broadcast each step (`runners.distributed`'s `agree`, so all
ranks stop at the same step), time the gradient all-reduce as `bl.stage("grad_sync")`, and
`save()` (called on every rank) pools the ranks' values into one result on rank 0.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from mlbaseline import formatting as fmt
from mlbaseline import stopping
from mlbaseline.comparison.labels import check_label
from mlbaseline.config import Config, build, deep_merge, nest, resolve
from mlbaseline.envinfo import fingerprint
from mlbaseline.errors import ConfigError, UsageError
from mlbaseline.measure.clock import Clock, PerfClock
from mlbaseline.measure.determinism import resolve_device
from mlbaseline.measure.gpu import GpuProbe, default_probe
from mlbaseline.measure.loop import StepLoop, StopRule
from mlbaseline.measure.memory import make_memory_meter
from mlbaseline.measure.pooling import group_summary, pool_metrics
from mlbaseline.measure.step import StepRecord, TrainRun
from mlbaseline.measure.telemetry import TelemetrySampler
from mlbaseline.measure.timers import StageTimer, make_timer
from mlbaseline.results import Metric, Result, write_result
from mlbaseline.runners.throughput import (
    RESIDUAL_LIMIT,
    Ending,
    Telemetry,
    assemble,
    make_sampler,
)
from mlbaseline.runners.throughput_records import Records, RunFacts
from mlbaseline.safewrite import check_target

B = TypeVar("B")
ENDED = "loop_ended"  # stop reason when the user's loop ended before the stop rule
# why the loop stopped, in words (measure.loop.STOP_REASONS and ENDED)
STOP_WORDS = {
    "stable": "the stop rule was met (minimum time and steps, stable windows)",
    "max_steps": "throughput.max_steps was reached before the windows were stable",
    "max_time": "throughput.max_time_s was reached before the windows were stable",
    "interrupted": "interrupted (Ctrl-C or a stop signal): the steps measured until then",
    ENDED: "the loop ended before the stop rule was met (run more steps, or lower "
    "throughput.min_steps / min_time_s)",
}
_NO_STEP = 0
_AUTO = 1  # begun by bl.data(); ends at the step block's end or at the next next()
_BLOCK = 2  # inside `with bl.step():`


class _Null:
    """The stage block once the measurement is over: costs one attribute lookup."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NULL = _Null()


class _StepBlock:
    def __init__(self, bl: Baseline, samples: int | None) -> None:
        self.bl, self.samples = bl, samples

    def __enter__(self) -> None:
        self.bl.begin_step()

    def __exit__(
        self, tp: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if tp is None:
            self.bl.end_step(self.samples)
        else:
            self.bl.abort_step(exc)


class Baseline:
    """Measure the user's own training loop at one batch size; see the module docstring.

    `device`: where the loop runs (`cpu`, `cuda`, `cuda:N`; default the config's, or `auto`
    without one: CUDA when there is a GPU); it picks the stage timer and memory meter.
    `batch_size`: samples per batch in this process (the `train.bs{B}` group, as in
    `mlb throughput`; default `golden.batch_size`). `grad_accum`: batches per step (an
    optimizer step over N micro-batches): `bl.data()` groups them; a step counts B × the
    batches it drew from `bl.data()` (or N × B), `bl.step(samples=n)` says otherwise. `amp`:
    the autocast dtype the loop uses, recorded (like `grad_accum`, a comparability key).
    The config is the CLI's (`config`: a `Config` or a YAML path; `profile`; `overrides` by
    dotted path, e.g. `{"throughput.min_time_s": 2}`): its throughput section is the warm-up
    and stop rule, its golden section the comparability keys. `stages`: the stage names in
    the order the result lists them (default: as first seen). `model`: what the result names
    as `workload.model` (default `api:NAME`; the Lightning callback names the module's class).
    `quiet`: no summary line when `save()` writes. `run_name` and `tags`: the run's label, as
    `--name` / `--tag` give it on the CLI. `advisory=True`: measure without cutting the loop:
    `bl.done` stays False (an `if bl.done: break` never fires), the stop rule still ends the
    measurement (`bl.ended`), the steps after it run untimed at the cost of an attribute
    lookup, and the result's `data.stop` says where measuring ended. `clock`, `timer` and
    `probe` are for tests."""

    def __init__(
        self,
        name: str = "own-loop",
        batch_size: int | None = None,
        device: str | None = None,
        *,
        config: Config | str | Path | None = None,
        profile: str | None = None,
        overrides: Mapping[str, Any] | None = None,
        telemetry: bool | None = None,
        clock: Clock | None = None,
        timer: StageTimer | None = None,
        probe: GpuProbe | None = None,
        stages: Iterable[str] = (),
        grad_accum: int | None = None,
        amp: str | None = None,
        model: str | None = None,
        quiet: bool = False,
        run_name: str | None = None,
        tags: Sequence[str] = (),
        advisory: bool = False,
    ) -> None:
        problems = check_label(run_name, tags, ("run_name", "tags"))
        if problems:
            raise ConfigError(problems[0])
        mine = {"workload.grad_accum": grad_accum, "workload.amp": amp, **(overrides or {})}
        # the run's label (mlb … --name / --tag): in history list, the report and compare
        mine |= {"history.name": run_name, "history.tags": list(tags) or None}
        cfg = _config(name, batch_size, device, config, profile, mine, model)
        self.name, self.cfg, self.quiet = name, cfg, quiet
        self.advisory = advisory  # bl.done never says stop: the user's loop runs its course
        self.summary: str | None = None  # the line save() printed (or would have, quiet)
        self.device = resolve_device(cfg.workload.device)
        self.batch_size = cfg.golden.batch_size
        self.grad_accum = cfg.workload.grad_accum
        self.clock = clock or PerfClock()
        self.timer = timer or make_timer(self.device, self.clock)
        self._ranks = _Ranks.detect(self.device, cfg.golden.seed)
        agree = self._ranks.agree if self._ranks is not None else None
        self.loop: StepLoop[StepRecord] = StepLoop(
            StopRule.from_config(cfg.throughput), self.clock, agree
        )
        self._own_probe = probe is None
        self._environment: dict[str, Any] | None = None
        self.probe = probe or default_probe()
        self.meter = make_memory_meter(self.device)
        self.meter.reset()
        # every stage: the declared ones in their order, then others as first seen
        self._stages: dict[str, None] = dict.fromkeys(stages)
        self._state = _NO_STEP
        self._drawn = 0
        on = cfg.throughput.telemetry if telemetry is None else telemetry
        self.sampler: TelemetrySampler | None = make_sampler(self.probe, cfg) if on else None
        self._window: list[float] = []
        if self.sampler is not None:
            self.sampler.start()

    # ------------------------------------------------------------ the user's loop

    @property
    def done(self) -> bool:
        """True once the stop rule is met (or Ctrl-C ended a step): stop the loop here.
        Always False with `advisory=True`: the loop runs on, unmeasured (`ended` says)."""
        return self.loop.done and not self.advisory

    @property
    def ended(self) -> bool:
        """True once the measurement is over (the stop rule met, Ctrl-C, or `close()`), in
        either mode: the steps after it are not timed."""
        return self.loop.done

    @property
    def measuring(self) -> bool:
        """True once the warm-up is over."""
        return self.loop.warmup is not None

    def step(self, samples: int | None = None) -> _StepBlock:
        """One training step; a step begun by `bl.data()`'s `next()` continues in it."""
        return _StepBlock(self, samples)

    # the step block's edges, for frameworks that call hooks instead of running a block

    def begin_step(self) -> None:
        """Begin a step (continue the one `bl.data()` began); nothing once ended."""
        if self.ended:
            return
        if self._state == _BLOCK:
            raise UsageError("bl.step(): steps do not nest")
        if self._state == _NO_STEP:
            self._begin()
        self._state = _BLOCK

    def end_step(self, samples: int | None = None) -> None:
        """End the step: it goes to the stop rule (`samples`: default batch size × the batches
        it drew from `bl.data()`, or × `grad_accum`)."""
        if self._state == _BLOCK:
            self._end(samples)

    def abort_step(self, exc: BaseException | None = None) -> None:
        """The step failed: it is not a measurement (Ctrl-C ends the measurement)."""
        if self._state == _NO_STEP:
            return
        if isinstance(exc, KeyboardInterrupt):
            self._stop_early("interrupted")
        else:  # an OOM, say: the error propagates, the step is dropped
            self._drop()

    def stage(self, name: str) -> Any:
        """Time one part of the current step (same name twice in a step: the times add)."""
        if self._state == _NO_STEP:
            if self.ended:
                return _NULL
            raise UsageError(
                f"bl.stage({name!r}) outside a step: put it in `with bl.step():` or in a "
                "loop over bl.data(...)"
            )
        self._stages[name] = None
        return self.timer.stage(name)

    def data(self, iterable: Iterable[B], per_step: int | None = None) -> Iterator[B]:
        """Iterate `iterable`, timing each `next()` as the stage `data_wait`. Outside a step
        block a `next()` begins a step, which ends at the `next()` after `per_step` items
        (gradient accumulation: `per_step` micro-batches per optimizer step; default
        `grad_accum`) unless a `with bl.step():` block ends it first; inside a step block it
        adds to that step. An epoch's end drops a step it leaves unfinished."""
        per_step = self.grad_accum if per_step is None else per_step
        if per_step < 1:
            raise UsageError(f"bl.data(per_step={per_step}): must be >= 1")
        it = iter(iterable)
        while True:
            if self.ended:
                yield from it  # measured: the loop goes on untimed
                return
            if self._state == _AUTO and self._drawn >= per_step:  # that was one whole step
                self._end(None)
                continue  # the stop rule may have just been met
            if self._state == _NO_STEP:
                self._begin()
                self._state = _AUTO
            try:
                with self.stage("data_wait"):
                    item = next(it)
            except StopIteration:
                if self._state == _AUTO:
                    self._drop()
                return
            except KeyboardInterrupt:
                self._stop_early("interrupted")
                raise
            self._drawn += 1
            yield item

    # ------------------------------------------------------------ step edges

    def _begin(self) -> None:
        if not self._window and self.sampler is not None:
            self._window.append(self.sampler.elapsed_s())
        self._drawn = 0  # batches bl.data() handed out in this step
        self.loop.begin()
        self.timer.begin_step()

    def _end(self, samples: int | None) -> None:
        self._state = _NO_STEP
        times = self.timer.end_step()
        self.meter.update()
        if times.memory is not None:  # the timer resets the peak per step: keep the highest
            self.meter.fold(times.memory.peak)
        # the batches this step drew through bl.data(), else grad_accum of them
        n = self.batch_size * (self._drawn or self.grad_accum) if samples is None else samples
        self.loop.end(StepRecord(times, n), times.total_s)
        if self.loop.done:
            self._close_window()

    def _drop(self) -> None:
        self._state = _NO_STEP
        self.loop.drop()

    def _stop_early(self, reason: str) -> None:
        self._state = _NO_STEP
        self.loop.end_early(reason)
        self._close_window()

    def _close_window(self) -> None:
        # [first step, end] on the sampler's clock: the report's share of this loop's timeline
        if self.sampler is not None:
            if len(self._window) == 1:
                self._window.append(self.sampler.elapsed_s())
            self.sampler.stop()

    # ------------------------------------------------------------ the result

    def close(self) -> None:
        """End the measurement (a loop that ended before the stop rule says so) and stop the
        telemetry sampler; `save()` and `result()` call it. The GPU probe is closed once the
        result has taken the environment fingerprint."""
        if not self.ended:
            self._stop_early(ENDED)

    def __enter__(self) -> Baseline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def result(self, telemetry_csv: str | None = None) -> Result:
        """The throughput result of the steps so far (on every rank; pooled over the ranks,
        whose metrics every rank must hand in: call it on all of them)."""
        self.close()
        loop = self.loop.result()
        rank = self._ranks.rank if self._ranks is not None else None
        world = self._ranks.world if self._ranks is not None else 1
        prefix = f"train.bs{self.batch_size}"
        stages = tuple(self._stages)
        run = TrainRun(
            batch_size=self.batch_size,
            prefix=prefix,
            stages=stages,
            loop=loop,
            memory_bytes=self.meter.peak_bytes(),
            memory_kind=self.meter.kind,
            world_size=world,
            rank=rank,
            accum=self.grad_accum,
        )
        parts = [(rank or 0, run.metrics(), run.info())]
        if self._ranks is not None:
            parts = self._ranks.gather(parts[0])
        records = self._records(stages, world)
        _add_train(records, self.batch_size, prefix, parts, loop.stop_reason, self._window)
        if loop.stop_reason == "interrupted":
            records.fault("interrupted", "Ctrl-C: the result holds what was measured until then")
            # SIGTERM/SIGHUP end a step as Ctrl-C does where the program handles them through
            # `mlbaseline.stopping.stop_signals()` (a library installs no handler of its own
            # in the user's process): the note then names the signal
            if stopping.received() is not None:
                records.fault("interrupted", stopping.note())
        # the CLI's one assembly: the same derived parts, checks and payload model
        return assemble(records, Ending(telemetry=Telemetry(self.sampler, telemetry_csv, True)))

    def _records(self, stages: tuple[str, ...], world: int) -> Records:
        import torch

        cfg = self.cfg.to_dict()
        if self._environment is None:  # taken once, with the probe still open
            self._environment = fingerprint(cfg, self.probe, self.device)
            if self._own_probe:
                self.probe.close()
        facts = RunFacts(
            config=cfg,
            environment=copy.deepcopy(self._environment),
            source="api",
            name=self.name,
            device=self.device,
            mode="train",
            nproc=world,
            repeats=1,
            determinism=None,  # the user's process sets its own
            allocator=None,
            timer=self.timer.kind,
            torch_threads=torch.get_num_threads(),
            stages=list(stages),
            residual_limit=RESIDUAL_LIMIT,
        )
        records = Records(facts)
        # where measuring ended in the user's loop, and whether bl.done let the loop run on
        records.blocks["stop"] = {"advisory": self.advisory, "step": len(self.loop.records)}
        if self._ranks is not None:
            records.blocks["distributed"] = {"world_size": world, "backend": self._ranks.backend}
        return records

    def save(
        self, path: str | Path, force: bool = False, history: bool | None = None
    ) -> Path | None:
        """Write the result JSON (atomically; an existing file needs `force`) and, with
        telemetry on, the timeline beside it (`NAME.telemetry.csv`), then record it in the
        history store as every mlb command does (`history`: default `history.record`; a store
        that cannot take it is a warning, the file is kept), and print the summary line on
        stderr unless `quiet` (kept in `self.summary`). Under torch.distributed call it on
        every rank: rank 0 writes, the others return None."""
        path = Path(path)
        writer = self._ranks is None or self._ranks.rank == 0
        if writer:  # before gathering: a name taken without force, or a device, is refused
            for name in (path, path.parent / f"{path.stem}.telemetry.csv"):
                check_target(name, force)
        csv_name = f"{path.stem}.telemetry.csv" if self.sampler is not None else None
        result = self.result(csv_name)  # on every rank: the ranks' values are gathered
        if not writer:
            return None
        if not result.measurements.get(f"train.bs{self.batch_size}.step", _EMPTY).values:
            raise UsageError(
                f"{self.name}: no measured step ({len(self.loop.records)} steps, all warm-up); "
                "run more steps or lower throughput.warmup_min"
            )
        if self.sampler is not None and csv_name is not None:
            self.sampler.write_csv(path.parent / csv_name, force=force)
        write_result(result, path, force=force)
        if self.cfg.history.record if history is None else history:
            _record(path, self.cfg)
        self.summary = summary_line(result, path, self.batch_size)
        if not self.quiet:  # stderr: the user's own stdout stays theirs
            print(self.summary + self._then(), file=sys.stderr)
        return path

    def _then(self) -> str:
        """What the user's loop does after the measurement, for the summary line."""
        if not self.advisory or self.loop.reason == ENDED:
            return ""
        n = len(self.loop.records)
        return f"; advisory: the loop was not stopped, its steps after step {n} are unmeasured"


def summary_line(result: Result, path: Path, batch_size: int) -> str:
    """One line for the end of a run: the file written, the steps measured, why they stopped
    and the step median with its CI (as Lightning's profiler summarises the end of `fit`)."""
    entry = result.data.get("batch_sizes", {}).get(str(batch_size), {})
    train = entry.get("train") or {}
    reason = str(entry.get("stop_reason") or "")
    why = STOP_WORDS.get(reason, reason or "unknown")
    step = train.get("time_s") or {}
    ci = fmt.with_ci(step.get("median"), step.get("ci_low"), step.get("ci_high"),
                     fmt.milliseconds)  # fmt: skip
    conf = train.get("confidence")
    conf_text = f"{fmt.share_percent(conf)} CI" if conf is not None else "CI"
    return (
        f"mlb: wrote {path}: {train.get('measured_steps', 0)} steps measured after "
        f"{train.get('warmup_steps', 0)} warm-up; stopped: {why}; step median {ci} ms "
        f"({conf_text})"
    )


def _record(path: Path, cfg: Config) -> None:
    """The history step of every result-writing command (`cli.common.record_in_history`):
    a store fault costs a warning, never the result file."""
    from mlbaseline.runners import history

    try:
        history.record([path], cfg)
    except Exception as exc:  # any store or driver fault: the result file is already safe
        warnings.warn(f"{path}: not recorded in the history ({exc})", stacklevel=3)


_EMPTY = Metric("none", "s", False, [])


def _with(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`overrides` (dotted paths) merged over `base`. The one None rule, `config.resolve`'s:
    a None value is unset (a `Baseline(amp=None)` argument), so it keeps the value below it."""
    merged = dict(base)
    for dotted, value in overrides.items():
        if value is not None:
            merged = deep_merge(merged, nest(dotted, value))
    return merged


def _config(
    name: str,
    batch_size: int | None,
    device: str | None,
    config: Config | str | Path | None,
    profile: str | None,
    overrides: Mapping[str, Any],
    model: str | None = None,
) -> Config:
    """The CLI's config (same precedence, same validation), with what the API knows better
    set on it: the batch size, the device, the model (the user's: `model`, else named
    `api:NAME`), and one batch size trained in this process."""
    if isinstance(config, Config):
        cfg = build(Config, _with(config.to_dict(), overrides))
    else:
        cfg = resolve(Path(config) if config else None, profile, overrides)
    size = batch_size or cfg.golden.batch_size
    mine = {
        "golden.batch_size": size,
        "workload.model": model or f"api:{name}",
        # the loop's device picks the timer (CUDA events on a GPU); without a config of the
        # user's the profile's (demo: cpu) would time a GPU loop with the host clock
        "workload.device": device or (cfg.workload.device if config else "auto"),
        "throughput.mode": "train",
        "throughput.batch_sizes": [size],
        "throughput.nproc": 1,
        "throughput.repeats": 1,
    }
    return build(Config, _with(cfg.to_dict(), mine))


Part = tuple[int, list[Metric], dict[str, Any]]


def _add_train(
    records: Records,
    batch_size: int,
    prefix: str,
    parts: list[Part],
    stop_reason: str,
    window: list[float],
) -> None:
    """The metrics (pooled over ranks when there are several) and the batch size's entry, as
    `mlb throughput` writes them."""
    if len(parts) == 1:
        metrics = {m.name: m for m in parts[0][1]}
    else:
        metrics = pool_metrics([(r, {m.name: m for m in ms}) for r, ms, _ in parts], "rank")
    for m in metrics.values():
        records.add_metric(m)
    info = dict(parts[0][2])
    if len(parts) > 1:
        info["peak_memory_bytes"] = max(p[2]["peak_memory_bytes"] for p in parts)
        info["peak_memory_bytes_per_rank"] = {str(r): i["peak_memory_bytes"] for r, _, i in parts}
        info["ranks"] = sorted(r for r, _, _ in parts)
    train = {**group_summary(records.metrics, prefix), **info}
    if len(window) == 2:
        train["telemetry_window_s"] = list(window)
    size = records.size(batch_size)
    size.status = "interrupted" if stop_reason == "interrupted" else "ok"
    size.stop_reason = stop_reason
    size.parts["train"] = train


@dataclasses.dataclass
class _Ranks:
    """This process's place in an initialized torch.distributed group."""

    rank: int
    world: int
    backend: str
    agree: Any  # Decision → Decision: rank 0's, broadcast (the CLI's distributed runner's)

    @classmethod
    def detect(cls, device: str, seed: int) -> _Ranks | None:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return None
        from mlbaseline.runners.distributed import AllReduceParallel

        rank, world, backend = dist.get_rank(), dist.get_world_size(), str(dist.get_backend())
        # the decision travels as a tensor on the backend's device (NCCL: the GPU)
        where = device if backend == "nccl" else "cpu"
        return cls(rank, world, backend, AllReduceParallel(rank, world, where, seed).agree)

    def gather(self, part: Part) -> list[Part]:
        """Every rank's part on every rank (rank order)."""
        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, part)
        return sorted(out, key=lambda p: p[0])


__all__ = ["ENDED", "STOP_WORDS", "Baseline", "summary_line"]
