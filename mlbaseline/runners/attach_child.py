"""The child side of `mlb attach`: booted in the script's own interpreter by the generated
`sitecustomize.py` (`runners.attach.write_boot`), before the script's first line.

`boot()` reads the protocol's environment (`MLB_ATTACH_MODE`, the status and control fds, the
result path and the config) and removes it, with the scratch folder from `PYTHONPATH`, so the
script's own subprocesses run plain. It installs nothing yet: the hooks (`measure.hooks`) go
in when the script imports torch (an import hook runs them right after `import torch`
finishes), so a script that sets up its environment before importing torch keeps that order.

Modes: `measure` (`MeasureSink`): the step records go to `measure.loop.StepLoop`, the warm-up
detection and stop rule of every path; once it is met the result (kind `throughput`, source
`attach`, built by `runners.throughput.assemble` like every other) is written to
`MLB_ATTACH_OUT` with the safe writer, `{"event":"done"}` is sent, and the hooks go quiet: the
script trains on unmeasured until the parent stops it. `turns`: `runners.attach_turns`'s sink
(paired A/B). A script that ends before the stop rule is met still gets its result, of the
steps so far (stop reason `script_ended`), written at exit.

Nothing here may break the script: an instrumentation fault is reported on the status fd
(`{"event":"error"}`) and the script runs on unmeasured.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import importlib.abc
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from mlbaseline.measure import hooks

MODE = "MLB_ATTACH_MODE"
STATUS_FD = "MLB_ATTACH_STATUS_FD"
CONTROL_FD = "MLB_ATTACH_CONTROL_FD"
OUT = "MLB_ATTACH_OUT"
CONFIG = "MLB_ATTACH_CONFIG"  # the resolved config, a JSON file in the scratch folder
META = "MLB_ATTACH_META"  # JSON: the command, the script and its sha256, --then
PYTHONPATH = "MLB_ATTACH_PYTHONPATH"  # the script's own PYTHONPATH, restored at boot
SCRATCH = "MLB_ATTACH_SCRATCH"
PROTOCOL = (MODE, STATUS_FD, CONTROL_FD, OUT, CONFIG, META, PYTHONPATH, SCRATCH)
ENDED = "script_ended"  # stop reason: the script ended before the stop rule was met

Emit = Callable[[dict[str, Any]], None]


def boot(environ: MutableMapping[str, str] | None = None) -> None:
    """Called by the generated sitecustomize: take the protocol out of the environment and
    install the hooks once torch is imported."""
    env = os.environ if environ is None else environ
    if not env.get(MODE):
        return
    settings = {k: env.pop(k) for k in PROTOCOL if k in env}
    if settings.get(PYTHONPATH):
        env["PYTHONPATH"] = settings[PYTHONPATH]
    else:
        env.pop("PYTHONPATH", None)
    emit = status_writer(settings)
    if settings.get(MODE) == "turns":
        atexit.register(QUICK_EXIT)  # first registered: it runs after every other handler
    after_import("torch", lambda: start(settings, emit))


class QuickExit:
    """How an A/B arm ends when `mlb ab` stops it: `stop()` raises SystemExit(0) at a step's
    end (the script's `finally` blocks and the DataLoader's shutdown run), and at exit, after
    every atexit handler (the script's, multiprocessing's, the turn sink's), the process ends
    at once: the interpreter's teardown of torch's modules is skipped. It took ~0.85 s of CPU
    per process here, and a unit's two stopped processes tear down while the next unit's two
    import and warm up, on the same CPUs: ~1.7 s of a unit's ~5 s start (measured on the bench
    script). Nothing is lost: the arm's process is `mlb`'s own, in its temporary folder, and
    its output is flushed first. A stopped arm so exits 0 (had its `finally` raised, the
    exception's traceback is printed and the process ends the usual way)."""

    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True
        raise SystemExit(0)

    def __call__(self) -> None:
        if not self.stopped or getattr(sys, "last_value", None) is not None:
            return
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(0)


QUICK_EXIT = QuickExit()


def status_writer(settings: Mapping[str, str]) -> Emit:
    """JSON lines on the status fd, each written whole (nothing when there is none). Stdlib
    only: this runs before the script's first line, which must not wait for NumPy."""
    if not settings.get(STATUS_FD):
        return lambda event: None
    fd = int(settings[STATUS_FD])

    def emit(event: dict[str, Any]) -> None:
        view = memoryview((json.dumps(event, separators=(",", ":")) + "\n").encode())
        with contextlib.suppress(OSError):  # a gone parent is no error of the script's
            while view:
                view = view[os.write(fd, view) :]

    return emit


def start(settings: Mapping[str, str], emit: Emit) -> hooks.Hooks | None:
    """Install the hooks with the mode's sink (right after `import torch`)."""
    try:
        mode = settings.get(MODE)
        if mode == "turns":
            from mlbaseline.runners.attach_turns import start as turns

            sink = turns(settings)
            sink.exit = QUICK_EXIT.stop
            return hooks.install(sink)
        if mode != "measure":
            raise ValueError(f"{MODE}: unknown mode {mode!r}")
        sink = MeasureSink.from_settings(settings, emit)
        installed = hooks.install(sink)
        sink.hooks = installed
        atexit.register(sink.close)
        return installed
    except Exception as exc:  # the script must run on: say why nothing is measured
        emit({"event": "error", "message": f"{type(exc).__name__}: {exc}"})
        return None


# ---------------------------------------------------------------- after `import torch`


class _After(importlib.abc.Loader):
    """The loader of one module, calling back once it has executed."""

    def __init__(self, inner: Any, callback: Callable[[], None]) -> None:
        self.inner, self.callback = inner, callback

    def create_module(self, spec: Any) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self.inner
        if module.__spec__ is not None:
            module.__spec__.loader = self.inner
        self.inner.exec_module(module)
        self.callback()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self.name, self.callback = name, callback

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)  # once: the real finders find it
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _After(spec.loader, self.callback)
        return spec


def after_import(name: str, callback: Callable[[], None]) -> None:
    """Call `callback` right after the module `name` is first imported (now if it is)."""
    if name in sys.modules:
        callback()
        return
    sys.meta_path.insert(0, _Finder(name, callback))


# ---------------------------------------------------------------- the measuring sink


class MeasureSink:
    """`sink.on_step` for mode `measure`: every step to the stop rule; the result once met."""

    # steps come 16 at a time, or 0.25 s after (measure.step_cutter.HANDOVER_GAP_S): the stop
    # rule may end a few steps late, which costs nothing; the hand-over's code runs warm
    handover_every = 16
    # memory read on one step in 64, at least once a second (measure.step_cutter.MEMORY_EVERY:
    # a read step is dear; a run's memory is the median of its read steps)
    memory_every = 64
    memory_gap_s = 1.0
    # the steps are cut once, when the stop rule is met or the script ends (`finish`): until
    # then the stop rule gets each step's total from the log's marks (measure.step_cutter's
    # MAX_SETTLE_LOG), the cutting's ~50 µs a step out of the script's way
    settle_at_end = True

    def __init__(
        self, cfg: Any, emit: Emit, out: Path | None, meta: Mapping[str, Any], clock: Any = None
    ) -> None:
        from mlbaseline.measure.loop import StepLoop, StopRule

        self.cfg, self.emit, self.out, self.meta = cfg, emit, out, dict(meta)
        self.loop: StepLoop[Any] = StepLoop(StopRule.from_config(cfg.throughput), clock)
        self.hooks: hooks.Hooks | None = None
        self.done = False
        self.result_path: Path | None = None
        self._sampler: Any = None
        self._window: list[float] = []
        self._probe: Any = None
        self.meter: Any = None
        self.workers_peak: int | None = None  # the DataLoader workers' summed VmHWM, at the end
        self._started = False

    @property
    def steps(self) -> list[hooks.HookStep]:
        """Every step handed over so far: the loop's own records."""
        return self.loop.records

    @classmethod
    def from_settings(cls, settings: Mapping[str, str], emit: Emit) -> MeasureSink:
        from mlbaseline.config import Config, build

        cfg = build(Config, json.loads(Path(settings[CONFIG]).read_text()))
        meta = json.loads(settings.get(META) or "{}")
        out = Path(settings[OUT]) if settings.get(OUT) else None
        return cls(cfg, emit, out, meta)

    def on_step(self, record: hooks.HookStep) -> None:
        # the loop keeps the hook's own record (its step time the value the rules test; also
        # `steps`): the stage timer's records are made once, for the result, not every step
        if self.done:
            return
        loop = self.loop
        if not loop.records:  # (not `steps`, a property: this runs every step)
            self.on_training_started()
            self._start_telemetry()
            self._start_meter()
        elif self.meter is not None:
            self.meter.update()
        warm = loop.warmup is not None
        loop.begin()
        loop.end(record, record.total_s)
        if not warm and loop.warmup is not None:
            self.emit({"event": "measuring"})
        if loop.reason:  # (`done`)
            self.finish()

    def on_steps(self, records: list[hooks.HookStep]) -> None:
        """Several steps handed over at once (the recorder's tally): recorded in one go
        where none of them can end the warm-up or the run (`StepLoop.end_quiet`), else one
        by one (`on_step`)."""
        loop = self.loop
        if not self.done and loop.records and loop.end_quiet(records, [r.total_s for r in records]):
            if self.meter is not None:  # (read at the hand-over: once for all of them)
                self.meter.update()
            return
        for record in records:
            self.on_step(record)

    def on_training_started(self) -> None:
        """The first backward or optimizer step (before the first whole step): the parent's
        first-step timeout is met."""
        if not self._started:
            self._started = True
            self.emit({"event": "first_step"})

    def _start_meter(self) -> None:
        from mlbaseline.measure.memory import make_memory_meter

        kind = self.hooks.rec.marker.kind if self.hooks is not None else "cpu"
        self.meter = make_memory_meter("cuda" if kind == "cuda" else "cpu")
        self.meter.reset()

    def _start_telemetry(self) -> None:
        if not self.cfg.throughput.telemetry:
            return
        from mlbaseline.measure.gpu import default_probe
        from mlbaseline.runners.throughput import make_sampler

        self._probe = default_probe()
        self._sampler = make_sampler(self._probe, self.cfg)
        self._sampler.start()
        self._window.append(self._sampler.elapsed_s())

    def finish(self, reason: str | None = None, unmeasured: str | None = None) -> None:
        """The stop rule is met (or the script ended: `reason`): write the result, say done,
        and let the script train on unmeasured. `unmeasured`: no step was measured; no result,
        this error instead (the hooks and the sampler are stopped all the same)."""
        if self.done:
            return
        self.done = True
        if self.hooks is not None:
            self.hooks.rec.turn_off()
            # the DataLoader workers' peak, read while they live (`mem.workers_peak`)
            from mlbaseline.measure.memory import workers_peak

            self.workers_peak = workers_peak(self.hooks.worker_pids())
        try:
            if self.hooks is not None:  # the logged steps cut: their records filled in
                self.hooks.rec.flush(block=True)
            if reason is not None:
                self.loop.end_early(reason)
            if self._sampler is not None:
                self._window.append(self._sampler.elapsed_s())
                self._sampler.stop()
            if unmeasured is not None:  # only at the script's exit (`close`)
                self.emit({"event": "error", "message": unmeasured, "at_exit": True})
                return
            result = self.result()
            if self.out is not None:
                from mlbaseline.results import write_result

                write_result(result, self.out, force=True)
                self.result_path = self.out
            self.emit({"event": "done", "result": str(self.out), "partial": reason is not None})
        except Exception as exc:  # never the script's problem: the parent reports it
            self.emit({"event": "error", "message": f"{type(exc).__name__}: {exc}"})
        finally:
            if self._probe is not None:
                with contextlib.suppress(Exception):
                    self._probe.close()

    def close(self) -> None:
        """At the script's exit: the steps so far, when the stop rule was not met."""
        if self.done:
            return
        if self.hooks is not None:
            self.hooks.rec.flush(block=True)
        if self.done:
            return
        if not self.steps:
            self.done = True
            self.emit({"event": "error", "message": "no training step seen", "at_exit": True})
            return
        loop, rule = self.loop, self.loop.rule
        if len(loop.records) <= loop.result().warmup:  # no measured step: no result, and why
            self.finish(
                ENDED,
                f"the script ended after {len(loop.records)} recorded training step(s), all "
                f"of them warm-up: none was measured; let it run longer (the stop rule measures "
                f"at least {rule.min_steps} steps after a warm-up of {rule.warmup_min}-"
                f"{rule.warmup_max})",
            )
            return
        self.finish(ENDED)

    def result(self) -> Any:
        """The throughput result of the steps (`runners.throughput.assemble`)."""
        from mlbaseline.measure.step import StepRecord
        from mlbaseline.measure.timers import StepTimes
        from mlbaseline.runners.attach_result import build_result

        timer = self.hooks.rec.marker.kind if self.hooks is not None else "cpu"
        done = self.loop.result()
        records = [
            StepRecord(StepTimes(s.total_s, dict(s.stages), s.total_s, s.memory), s.samples)
            for s in done.records
        ]
        loop = dataclasses.replace(done, records=records)
        return build_result(self.cfg, loop, self.steps, self.meta, timer, self)


__all__ = [
    "CONFIG",
    "CONTROL_FD",
    "ENDED",
    "META",
    "MODE",
    "OUT",
    "PROTOCOL",
    "PYTHONPATH",
    "QUICK_EXIT",
    "SCRATCH",
    "STATUS_FD",
    "MeasureSink",
    "QuickExit",
    "after_import",
    "boot",
    "start",
]
