"""The profiler cross-check (`--trace`): a short `torch.profiler` window over K training steps,
one `record_function` range per stage, the profiler's time per stage against mlb's stage
timers, and a Chrome/Perfetto trace with the telemetry as counter tracks.

- **Where the window is**: K *extra* steps after the measured ones, with the same model,
  optimizer and loader (`capture`, called by `runners.sweep.train_one_size` once the stop rule
  has ended the measurement). The profiler's own cost never reaches a measured sample; the K
  traced steps are timed by the same stage timer, so both sides see the very same steps.
- **The ranges**: `TracingTimer` wraps the run's `StageTimer`: each `stage(name)` block also
  opens `record_function("mlb.<name>")` (outside the timer's own block, so mlb's figure does
  not carry the range's cost), each step is `mlb.step`. Nothing changes when tracing is off:
  the wrapper is only in place during the window.
- **The comparison** (`compare`): per stage, the sum over the K steps of the profiler's ranges
  (CPU ranges, `cat: user_annotation`; on CUDA the GPU span of the range's kernels,
  `gpu_user_annotation`, where the range launched any, since the CUDA timer times the GPU side;
  the step itself always by its host range)
  against the sum of mlb's stage times. They disagree when they differ by more than
  `tolerance` × mlb's time and by more than `FLOOR_S` per step (a range costs a few
  microseconds: tiny stages would always "disagree" in relative terms).
- **Counter tracks**: telemetry rows from the window (± one interval) as `"ph": "C"` events
  (CPU %, RSS, GPU kernel-active %), placed on the trace's clock through one paired reading of
  the wall clock and the sampler's clock at the window start.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlbaseline import scratch
from mlbaseline.config import Config
from mlbaseline.errors import UsageError
from mlbaseline.measure.step import TrainStep
from mlbaseline.measure.timers import StageTimer, StepTimes
from mlbaseline.results import Result
from mlbaseline.safewrite import write_text

PREFIX = "mlb."
STEP_RANGE = "mlb.step"
FLOOR_S = 50e-6  # per step: below this a difference is the ranges' own cost, not a finding
WINDOW = "after the measured steps: K extra steps, never in the samples"
COUNTERS = {  # telemetry column → counter track name
    "cpu_pct": "telemetry: CPU %",
    "rss_bytes": "telemetry: RSS bytes",
}


class TracingTimer:
    """A `StageTimer` that also opens one profiler range per stage and per step."""

    def __init__(self, inner: StageTimer) -> None:
        from torch.profiler import record_function

        self.inner, self.kind = inner, inner.kind
        self._range = record_function
        self._step: Any = None

    def begin_step(self) -> None:
        self._step = self._range(STEP_RANGE)
        self._step.__enter__()
        self.inner.begin_step()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        with self._range(PREFIX + name), self.inner.stage(name):
            yield

    def end_step(self) -> StepTimes:
        times = self.inner.end_step()
        self._step.__exit__(None, None, None)
        return times


@dataclass
class TraceWindow:
    """What one window captured: mlb's times of the K traced steps, the profiler's Chrome
    trace, and the clock pairing that places telemetry on the trace's time axis."""

    times: list[StepTimes]
    trace: dict[str, Any]
    wall0_ns: int  # time.time_ns() at the window start …
    tele0_s: float | None  # … and the sampler's t_s at the same moment (None: no sampler)
    tele1_s: float | None = None


def capture(
    step: TrainStep, steps: int, device: str, elapsed: Callable[[], float] | None = None
) -> TraceWindow:
    """Run `steps` more training steps under torch.profiler with a range per stage; `elapsed`
    is the telemetry sampler's clock (`TelemetrySampler.elapsed_s`), if one runs."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    inner = step.timer
    step.timer = TracingTimer(inner)
    try:
        with scratch.folder("trace") as tmp:
            wall0, tele0 = time.time_ns(), elapsed() if elapsed else None
            with profile(activities=activities) as prof:
                times = [step().times for _ in range(steps)]
            tele1 = elapsed() if elapsed else None
            path = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(path))
            doc = json.loads(path.read_text(encoding="utf-8"))
    finally:
        step.timer = inner
    return TraceWindow(times, doc, wall0, tele0, tele1)


# ---------------------------------------------------------------- comparison


def _ranges(trace: dict[str, Any], cat: str) -> dict[str, list[float]]:
    """Durations (s) of the mlb ranges of one category, by range name."""
    out: dict[str, list[float]] = {}
    for e in trace.get("traceEvents", []):
        name = e.get("name", "")
        if e.get("ph") == "X" and e.get("cat") == cat and name.startswith(PREFIX):
            out.setdefault(name, []).append(float(e.get("dur", 0.0)) / 1e6)
    return out


def compare(
    window: TraceWindow, stages: tuple[str, ...] | list[str], tolerance: float
) -> dict[str, Any]:
    """Per stage (and the step): the profiler's summed time, mlb's, and whether they agree."""
    k = len(window.times)
    cpu = _ranges(window.trace, "user_annotation")
    gpu = _ranges(window.trace, "gpu_user_annotation")
    rows: dict[str, dict[str, Any]] = {}
    for stage in [*stages, "step"]:
        name = STEP_RANGE if stage == "step" else PREFIX + stage
        if stage == "step":
            mlb = sum(t.total_s for t in window.times)
        else:
            mlb = sum(t.stages.get(stage, 0.0) for t in window.times)
        # only a CUDA window has GPU spans; the step is the host's range on every device (the
        # CUDA timer synchronizes at the step's edges, so the host span covers the GPU's work,
        # where the GPU span would leave out a step that starts with a wait for data)
        on_gpu = name in gpu and stage != "step"
        spans = gpu[name] if on_gpu else cpu.get(name, [])
        prof = sum(spans)
        diff = prof - mlb
        agree = abs(diff) <= max(tolerance * mlb, FLOOR_S * k)
        rows[stage] = {
            "mlb_s": mlb,
            "profiler_s": prof,
            "ranges": len(spans),
            "source": "gpu_user_annotation" if on_gpu else "user_annotation",
            "difference": diff / mlb if mlb > 0 else None,
            # at least one range per step (gradient accumulation opens several)
            "agree": bool(agree and len(spans) >= k),
        }
    return {
        "steps": k,
        "window": WINDOW,
        "tolerance": tolerance,
        "floor_s_per_step": FLOOR_S,
        "stages": rows,
    }


def disagreements(summary: dict[str, Any]) -> list[str]:
    """One sentence per stage where the profiler and mlb's timer disagree."""
    out = []
    tol = summary["tolerance"]
    for stage, row in summary["stages"].items():
        if row["agree"]:
            continue
        if row["ranges"] < summary["steps"]:
            out.append(
                f"{stage}: the profiler saw {row['ranges']} ranges in {summary['steps']} steps"
            )
            continue
        rel = row["difference"]
        out.append(
            f"{stage}: profiler {row['profiler_s'] * 1e3:.3f} ms vs mlb "
            f"{row['mlb_s'] * 1e3:.3f} ms over {summary['steps']} steps"
            + (f" ({rel:+.0%}, beyond ±{tol:.0%})" if rel is not None else "")
        )
    return out


# ---------------------------------------------------------------- the trace file


def counter_events(
    window: TraceWindow, rows: list[dict[str, Any]], interval_s: float
) -> list[dict[str, Any]]:
    """Telemetry rows of the window (± one interval) as Chrome counter events on the trace's
    clock (`ts` in µs after `baseTimeNanoseconds`)."""
    if window.tele0_s is None or not rows:
        return []
    base_ns = int(window.trace.get("baseTimeNanoseconds", 0))
    lo = window.tele0_s - interval_s
    hi = (window.tele1_s if window.tele1_s is not None else window.tele0_s) + interval_s
    gpu_cols = [c for c in rows[0] if c.startswith("gpu") and c.endswith("kernel_active_pct")]
    names = {
        **COUNTERS,
        **{c: f"telemetry: {c.split('_', 1)[0]} kernel-active %" for c in gpu_cols},
    }
    out = []
    for row in rows:
        t = row.get("t_s")
        if not isinstance(t, (int, float)) or not lo <= t <= hi:
            continue
        ts_us = (window.wall0_ns + (t - window.tele0_s) * 1e9 - base_ns) / 1e3
        for col, track in names.items():
            value = row.get(col)
            if isinstance(value, (int, float)):
                out.append(
                    {
                        "ph": "C",
                        "name": track,
                        "pid": os.getpid(),
                        "ts": ts_us,
                        "args": {col: value},
                    }
                )
    return out


def write_trace(
    window: TraceWindow, path: Path, rows: list[dict[str, Any]], interval_s: float
) -> int:
    """The profiler's trace plus the counter tracks, written atomically; returns how many
    counter events it holds. The caller has refused an existing file without --force."""
    doc = dict(window.trace)
    counters = counter_events(window, rows, interval_s)
    doc["traceEvents"] = [*window.trace.get("traceEvents", []), *counters]
    write_text(path, json.dumps(doc), force=True)
    return len(counters)


# ---------------------------------------------------------------- one run's trace windows


@dataclass
class TraceSession:
    """The `--trace` windows of one throughput run: one per batch size, each compared and
    (with an output folder) written as `{prefix}trace.bs{B}.json`."""

    steps: int
    tolerance: float
    device: str
    sampler: Any = None  # the running TelemetrySampler, or None
    folder: Path | None = None
    prefix: str = ""
    windows: dict[int, TraceWindow] = field(default_factory=dict)

    def tracer(self, batch_size: int) -> Callable[[TrainStep], None]:
        """The hook `train_one_size` calls once the measurement has ended."""

        def run(step: TrainStep) -> None:
            elapsed = self.sampler.elapsed_s if self.sampler is not None else None
            self.windows[batch_size] = capture(step, self.steps, self.device, elapsed)

        return run

    def finish(self, result: Result, batch_size: int, stages: Any) -> dict[str, Any] | None:
        """Compare the window of `batch_size`, write its file, warn on each disagreement;
        returns the summary (None: no window was captured, e.g. the size failed)."""
        window = self.windows.pop(batch_size, None)
        if window is None:
            return None
        summary = compare(window, list(stages), self.tolerance)
        if self.folder is not None:
            name = f"{self.prefix}trace.bs{batch_size}.json"
            rows = list(self.sampler.rows) if self.sampler is not None else []
            interval = self.sampler.interval_s if self.sampler is not None else 0.0
            summary["counter_events"] = write_trace(window, self.folder / name, rows, interval)
            summary["file"] = name
            result.artifacts[f"trace.bs{batch_size}"] = name
        else:
            summary["file"] = None
            summary["stored"] = "not written: no output path was given (use -o to keep it)"
        entry = result.data.get("batch_sizes", {}).get(str(batch_size), {})
        if isinstance(entry.get("train"), dict):
            entry["train"]["trace"] = summary
        for text in disagreements(summary):
            result.warn(
                "trace_disagreement",
                f"train.bs{batch_size}: the profiler and mlb's stage timer disagree on {text}",
                metric=f"train.bs{batch_size}.{text.split(':', 1)[0]}",
                threshold=self.tolerance,
            )
        return summary


def trace_session(
    cfg: Config, device: str, sampler: Any, folder: Path | None, telemetry_name: str
) -> TraceSession | None:
    """The run's trace session when `throughput.trace` is on (else None); its files are named
    like the telemetry CSV beside the result: `tp.telemetry.csv` → `tp.trace.bs{B}.json`."""
    t = cfg.throughput
    if not t.trace:
        return None
    if t.nproc > 1:
        raise UsageError("throughput.trace: the profiler window is for one process (nproc 1)")
    prefix = telemetry_name.removesuffix("telemetry.csv")
    return TraceSession(t.trace_steps, t.trace_tolerance, device, sampler, folder, prefix)


def trace_names(cfg: Config, telemetry_name: str) -> list[str]:
    """The trace files a run with `cfg` writes (for the CLI's no-overwrite check)."""
    if not cfg.throughput.trace or cfg.throughput.mode == "inference":
        return []
    prefix = telemetry_name.removesuffix("telemetry.csv")
    return [f"{prefix}trace.bs{b}.json" for b in cfg.throughput.batch_sizes]


__all__ = [
    "FLOOR_S",
    "STEP_RANGE",
    "TraceSession",
    "TraceWindow",
    "TracingTimer",
    "capture",
    "compare",
    "counter_events",
    "disagreements",
    "trace_names",
    "trace_session",
    "write_trace",
]
