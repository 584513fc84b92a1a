"""Energy of the measured training steps: joules per step and per sample, one figure per
window of at least `MIN_WINDOW_S` of steps.

Where the energy comes from (one source per run, the first that answers):
- "nvml-counter": NVML's total-energy counter (`nvmlDeviceGetTotalEnergyConsumption`, mJ since
  the driver loaded; Volta and newer), differences over each window, as Zeus' `ZeusMonitor` and
  CodeCarbon read it. The driver updates it every ~20-100 ms (`UPDATE_PERIOD_S`, the slow end);
- "power-polling": where that counter is absent, the telemetry sampler's power readings
  (`gpu{i}_power_w`, one every `golden.telemetry_interval_s`) integrated over the window by the
  trapezoid rule (its update period is the sampling interval);
- "rapl": on CPU, the RAPL package counters `/sys/class/powercap/intel-rapl:N/energy_uj` (µJ,
  wrapping at `max_energy_range_uj`), where the kernel lets this user read them.
Otherwise nothing is measured and the result says why (`EnergyMeter.block`).

A window shorter than its source's update period is flagged `short_window` and carries no
energy: the counter may not have moved, and 0 J would be a lie. A window the counter did not
move across is flagged `no_update`; one under `MIN_WINDOW_S` is `below_min_window` (read, kept
in the block, not turned into a J/step figure). What a figure covers: the whole device (every
process on the GPU) or the CPU packages (not DRAM), over the wall time of the steps, the work
between steps (the control kernel, the loop) included.
"""

from __future__ import annotations

import bisect
import itertools
import math
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mlbaseline.measure.clock import Clock, PerfClock
from mlbaseline.measure.gpu import GpuInfo, GpuProbe, GpuProbeError
from mlbaseline.results import Metric

UPDATE_PERIOD_S = 0.1  # NVML's energy counter: documented updates every ~20-100 ms
RAPL_UPDATE_S = 0.001  # RAPL counters update about every millisecond
MIN_WINDOW_S = 1.0  # the shortest window turned into a J/step figure
MARK_GAP_S = 0.01  # at most one counter read per 10 ms of steps: short steps share a read
POWERCAP = Path("/sys/class/powercap")
_TOP_ZONE = re.compile(r"intel-rapl:\d+$")


@dataclass(frozen=True)
class Mark:
    """A reading taken after a step: steps finished so far, the time on the source's clock,
    and the cumulative joules (None for power polling, integrated later, or a failed read)."""

    steps: int
    t_s: float
    joules: float | None


class EnergySource(Protocol):
    name: str
    update_period_s: float

    def now_s(self) -> float: ...

    def read_j(self) -> float | None:
        """Cumulative joules now (None: this source integrates later, or the read failed)."""
        ...

    def between_j(self, a: Mark, b: Mark) -> float | None:
        """Joules between two marks; None when they cannot be told."""
        ...

    def describe(self) -> dict[str, Any]: ...


def _counter_difference(a: Mark, b: Mark) -> float | None:
    if a.joules is None or b.joules is None:
        return None
    return b.joules - a.joules


# ---------------------------------------------------------------- NVML


class NvmlCounter:
    """The GPU's total-energy counter, read through the probe."""

    name = "nvml-counter"
    update_period_s = UPDATE_PERIOD_S

    def __init__(self, probe: GpuProbe, index: int, clock: Clock | None = None) -> None:
        self.probe, self.index = probe, index
        self.clock = clock or PerfClock()

    def now_s(self) -> float:
        return self.clock.now_ns() / 1e9

    def read_j(self) -> float | None:
        try:
            mj = self.probe.total_energy_mj(self.index)
        except GpuProbeError:
            return None
        return mj / 1000.0 if mj is not None else None

    def between_j(self, a: Mark, b: Mark) -> float | None:
        return _counter_difference(a, b)

    def describe(self) -> dict[str, Any]:
        return {"device_index": self.index, "covers": "the whole GPU (every process on it)"}


def nvml_index(
    ordinal: int, devices: Sequence[GpuInfo], uuid: str | None, cuda_visible: str | None
) -> int | None:
    """The NVML index of CUDA device `ordinal`: by its UUID where torch gives one (CUDA's
    order need not be NVML's PCI order), else through CUDA_VISIBLE_DEVICES (indices or UUID
    prefixes), else the ordinal itself. None: no such device."""
    if uuid:
        for d in devices:
            if d.uuid.removeprefix("GPU-") == uuid.removeprefix("GPU-"):
                return d.index
    if cuda_visible is not None:
        tokens = [t.strip() for t in cuda_visible.split(",") if t.strip()]
        if ordinal >= len(tokens):
            return None
        token = tokens[ordinal]
        for d in devices:
            if (d.index == int(token)) if token.isdigit() else d.uuid.startswith(token):
                return d.index
        return None
    return ordinal if any(d.index == ordinal for d in devices) else None


def _cuda_uuid(ordinal: int) -> str | None:
    try:
        import torch

        return str(torch.cuda.get_device_properties(ordinal).uuid)
    except Exception:  # an older torch without .uuid, or no CUDA: fall back to the order
        return None


# ---------------------------------------------------------------- power polling


class PowerPolling:
    """The telemetry sampler's power column, integrated over each window after the fact."""

    name = "power-polling"

    def __init__(self, sampler: Any, index: int) -> None:
        self.sampler, self.index = sampler, index
        self.column = f"gpu{index}_power_w"
        self.update_period_s = float(sampler.interval_s)

    def now_s(self) -> float:
        return float(self.sampler.elapsed_s())  # the clock of the rows' t_s

    def read_j(self) -> float | None:
        return None

    def between_j(self, a: Mark, b: Mark) -> float | None:
        # the rows are in time order: only those around the window (an hour of a run's
        # timeline is tens of thousands of rows, read once per window)
        rows, edge = self.sampler.rows, 1.5 * self.update_period_s
        n = len(rows)  # the sampler thread may append meanwhile: a fixed snapshot
        lo = bisect.bisect_left(rows, a.t_s - 2 * edge, 0, n, key=_t_s)
        hi = bisect.bisect_right(rows, b.t_s + 2 * edge, 0, n, key=_t_s)
        points = power_points(rows[lo:hi], self.column)
        return integrate_power(points, a.t_s, b.t_s, max_edge_s=edge)

    def describe(self) -> dict[str, Any]:
        return {
            "device_index": self.index,
            "interval_s": self.update_period_s,
            "covers": "the whole GPU (every process on it), sampled power integrated",
        }


def _t_s(row: dict[str, Any]) -> float:
    return float(row["t_s"])


def power_points(rows: Sequence[dict[str, Any]], column: str) -> list[tuple[float, float]]:
    """(t_s, watts) of the rows that have a power reading (a gap is skipped, not zero)."""
    out = []
    for r in rows:
        w = r.get(column)
        if w in ("", None):
            continue
        out.append((float(r["t_s"]), float(w)))
    return sorted(out)


def integrate_power(
    points: Sequence[tuple[float, float]], t0: float, t1: float, max_edge_s: float
) -> float | None:
    """Joules over [t0, t1] by the trapezoid rule on the power samples, linear between them;
    an edge past the first/last sample holds that sample's power, for at most `max_edge_s`
    (the sampler's next reading is at most an interval away). None: not enough samples."""
    if t1 <= t0 or len(points) < 2:
        return None
    if points[0][0] > t0 + max_edge_s or points[-1][0] < t1 - max_edge_s:
        return None
    inside = [(t, w) for t, w in points if t0 < t < t1]
    edges = [(t0, _power_at(points, t0)), *inside, (t1, _power_at(points, t1))]
    return sum((tb - ta) * (wa + wb) / 2 for (ta, wa), (tb, wb) in itertools.pairwise(edges))


def _power_at(points: Sequence[tuple[float, float]], t: float) -> float:
    if t <= points[0][0]:
        return points[0][1]
    for (ta, wa), (tb, wb) in itertools.pairwise(points):
        if ta <= t <= tb:
            return wa if tb == ta else wa + (wb - wa) * (t - ta) / (tb - ta)
    return points[-1][1]


# ---------------------------------------------------------------- RAPL


@dataclass
class _Zone:
    path: Path
    name: str
    max_uj: int
    last_uj: int


class RaplCounter:
    """The CPU packages' RAPL counters, summed, each unwrapped at its `max_energy_range_uj`."""

    name = "rapl"
    update_period_s = RAPL_UPDATE_S

    def __init__(self, zones: list[_Zone], clock: Clock | None = None) -> None:
        self.zones = zones
        self.clock = clock or PerfClock()
        self.total_uj = 0

    def now_s(self) -> float:
        return self.clock.now_ns() / 1e9

    def read_j(self) -> float | None:
        """Cumulative joules since opened. A counter that went down wrapped once (reads are at
        most seconds apart; a wrap takes minutes at full load); a failed read is None."""
        for z in self.zones:
            try:
                now = int((z.path / "energy_uj").read_text())
            except (OSError, ValueError):
                return None
            delta = now - z.last_uj
            if delta < 0:
                delta += z.max_uj
            self.total_uj += delta
            z.last_uj = now
        return self.total_uj / 1e6

    def between_j(self, a: Mark, b: Mark) -> float | None:
        return _counter_difference(a, b)

    def describe(self) -> dict[str, Any]:
        return {
            "zones": [f"{z.path.name} ({z.name})" for z in self.zones],
            "covers": "the CPU packages (every process on them; not DRAM)",
        }


def open_rapl(root: Path = POWERCAP, clock: Clock | None = None) -> tuple[RaplCounter | None, str]:
    """The RAPL counter of the CPU packages, or (None, why not: absent or not readable)."""
    tops = sorted(p for p in _listdir(root) if _TOP_ZONE.match(p.name))
    if not tops:
        return None, f"RAPL absent: no {root}/intel-rapl:N zone (no RAPL on this CPU/kernel)"
    named = [(p, _read(p / "name") or p.name) for p in tops]
    # a platform zone ("psys") already holds the packages: sum the packages only
    packages = [(p, n) for p, n in named if n.startswith("package")] or named
    zones = []
    for path, name in packages:
        try:
            first = int((path / "energy_uj").read_text())
        except PermissionError:
            return None, (
                f"RAPL not readable: {path / 'energy_uj'}: permission denied (root-only on "
                "kernels with the CVE-2020-8694 fix)"
            )
        except (OSError, ValueError) as exc:
            return None, f"RAPL not readable: {path / 'energy_uj'}: {_why(exc)}"
        top = _read(path / "max_energy_range_uj")
        zones.append(_Zone(path, name, int(top) if top and top.isdigit() else 0, first))
    return RaplCounter(zones, clock), ""


def _listdir(root: Path) -> list[Path]:
    try:
        return [root / n for n in os.listdir(root)]
    except OSError:
        return []


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _why(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or str(exc)


# ---------------------------------------------------------------- choosing one


def open_source(
    device: str,
    probe: GpuProbe,
    sampler: Any = None,
    powercap: Path = POWERCAP,
    clock: Clock | None = None,
    cuda_visible: str | None = None,
) -> tuple[EnergySource | None, str]:
    """The energy source for `device`, or (None, why nothing can measure it here)."""
    if device == "cpu":
        return open_rapl(powercap, clock)
    if not device.startswith("cuda"):
        return None, f"energy is measured on CUDA (NVML) and CPU (RAPL), not on {device}"
    ok, reason = probe.available()
    if not ok:
        return None, f"no NVML: {reason}"
    ordinal = int(device.partition(":")[2] or 0)
    try:
        devices = probe.devices()
    except GpuProbeError as exc:
        return None, f"NVML: {exc}"
    visible = cuda_visible if cuda_visible is not None else os.environ.get("CUDA_VISIBLE_DEVICES")
    index = nvml_index(ordinal, devices, _cuda_uuid(ordinal), visible)
    if index is None:
        return None, f"NVML lists no device for {device}"
    counter = NvmlCounter(probe, index, clock)
    # a probe written before the counter (an older fake) has none: the same as unsupported
    if getattr(probe, "total_energy_mj", None) is not None and counter.read_j() is not None:
        return counter, ""
    if sampler is not None and index in getattr(sampler, "gpu_indices", []):
        return PowerPolling(sampler, index), ""
    return None, (
        "the GPU has no NVML energy counter (before Volta, or a vGPU/MIG instance) and "
        "telemetry is off (throughput.telemetry), so no power samples to integrate"
    )


# ---------------------------------------------------------------- windows and figures


@dataclass(frozen=True)
class Window:
    """One window of measured steps: its wall time, steps, samples, joules (None when it could
    not be told) and flag ("" when it gives a J/step figure)."""

    start_s: float
    seconds: float
    steps: int
    samples: int
    joules: float | None
    flag: str = ""
    replicate: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "replicate" or v is not None}


def measure_window(
    source: EnergySource, a: Mark, b: Mark, samples: int, min_s: float = MIN_WINDOW_S
) -> Window:
    """The energy between two marks, flagged where it cannot be a figure: shorter than the
    source's update period (not read at all: never 0 J), no reading, a counter that did not
    move, or shorter than `min_s`."""
    seconds = b.t_s - a.t_s
    steps = b.steps - a.steps

    def window(joules: float | None, flag: str) -> Window:
        return Window(a.t_s, seconds, steps, samples, joules, flag)

    if seconds < source.update_period_s:
        return window(None, "short_window")
    joules = source.between_j(a, b)
    if joules is None or not math.isfinite(joules):
        return window(None, "no_reading")
    if joules <= 0:
        return window(None, "no_update")
    return window(joules, "below_min_window" if seconds < min_s else "")


def split_windows(marks: Sequence[Mark], first_step: int, min_s: float) -> list[tuple[Mark, Mark]]:
    """Consecutive windows over the marks from `first_step` on, each closed at the first mark
    at least `min_s` after its start; a shorter tail joins the last window. A phase shorter
    than `min_s` is one (short) window."""
    usable = [m for m in marks if m.steps >= first_step]
    if len(usable) < 2:
        return []
    out: list[tuple[Mark, Mark]] = []
    start = usable[0]
    for m in usable[1:]:
        if m.t_s - start.t_s >= min_s:
            out.append((start, m))
            start = m
    if start is not usable[-1]:
        out = [*out[:-1], (out[-1][0], usable[-1])] if out else [(start, usable[-1])]
    return out


@dataclass
class EnergyMeter:
    """One run's energy, batch size by batch size: `begin()` before the steps, `mark(steps)`
    after each step (between steps, outside the step timer), `end(...)` after the loop → the
    J/step and J/sample metrics; `block()` is the result's `data["energy"]`."""

    source: EnergySource | None
    reason: str = ""
    gap_s: float = MARK_GAP_S
    min_window_s: float = MIN_WINDOW_S
    sizes: dict[str, dict[str, Any]] = field(default_factory=dict)
    _marks: list[Mark] = field(default_factory=list)
    _last_s: float = -math.inf

    def begin(self) -> None:
        self._marks, self._last_s = [], -math.inf

    def mark(self, steps: int) -> None:
        if self.source is None:
            return
        t = self.source.now_s()
        if t - self._last_s < self.gap_s:
            return
        self._last_s = t
        self._marks.append(Mark(steps, t, self.source.read_j()))

    def end(
        self, prefix: str, batch_size: int, warmup: int, samples: Sequence[int]
    ) -> list[Metric]:
        """The windows of the measured steps (`samples[i]`: samples of step i + 1; the first
        `warmup` steps are not measured) → one J/step and one J/sample value per window."""
        if self.source is None:
            return []
        pairs = split_windows(self._marks, warmup, self.min_window_s)
        windows = [
            measure_window(self.source, a, b, sum(samples[a.steps : b.steps]), self.min_window_s)
            for a, b in pairs
        ]
        self._marks = []
        entry: dict[str, Any] = {"windows": [w.to_dict() for w in windows]}
        good = [w for w in windows if not w.flag and w.joules is not None]
        if not good:
            entry["reason"] = _no_figure(windows, self.min_window_s)
        self.sizes[str(batch_size)] = entry
        return _metrics(prefix, good, self.source.name) if good else []

    def block(self) -> dict[str, Any]:
        if self.source is None:
            return {"measured": False, "reason": self.reason}
        out: dict[str, Any] = {
            "measured": bool(self.sizes),
            "source": self.source.name,
            "update_period_s": self.source.update_period_s,
            "min_window_s": self.min_window_s,
            **self.source.describe(),
            "batch_sizes": self.sizes,
        }
        if not self.sizes:  # the single-process sweep marks the steps; nothing else does yet
            out["reason"] = (
                "no training steps were measured in this process (inference only, or a "
                "multi-process run: energy is measured by the single-process sweep)"
            )
        return out


def _no_figure(windows: Sequence[Window], min_s: float) -> str:
    if not windows:
        return "too few measured steps to form a window"
    flags = sorted({w.flag for w in windows})
    total = sum(w.seconds for w in windows)
    return (
        f"no window gave a figure ({', '.join(flags)}): {total:.2f} s of measured steps, "
        f"a J/step figure needs windows of >= {min_s:g} s"
    )


def _metrics(prefix: str, windows: Sequence[Window], source: str) -> list[Metric]:
    meta = {
        "role": "energy",
        "group": prefix,
        "source": source,
        "window_s": min(w.seconds for w in windows),  # every value spans at least this
        "windows": len(windows),
    }
    return [
        Metric(
            f"{prefix}.energy_per_step",
            "J",
            False,
            [w.joules / w.steps for w in windows],  # type: ignore[operator]
            meta={**meta, "energy": "per_step"},
        ),
        Metric(
            f"{prefix}.energy_per_sample",
            "J",
            False,
            [w.joules / max(w.samples, 1) for w in windows],  # type: ignore[operator]
            meta={**meta, "energy": "per_sample"},
        ),
    ]


def pooled_block(blocks: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Fresh-process replicates: one block, each window tagged with its replicate."""
    present = [(i, b) for i, b in enumerate(blocks) if b]
    if not present:
        return None
    out = {k: v for k, v in present[0][1].items() if k != "batch_sizes"}
    sizes: dict[str, dict[str, Any]] = {}
    for i, block in present:
        for key, entry in (block.get("batch_sizes") or {}).items():
            into = sizes.setdefault(key, {"windows": []})
            into["windows"] += [{**w, "replicate": i} for w in entry.get("windows", [])]
            if entry.get("reason"):
                into["reason"] = entry["reason"]
    if sizes or "batch_sizes" in present[0][1]:
        out["batch_sizes"] = sizes
    return out


def open_meter(device: str, probe: GpuProbe, sampler: Any = None) -> EnergyMeter:
    """The meter of one throughput run: its source, or none with the reason."""
    source, reason = open_source(device, probe, sampler, POWERCAP)
    return EnergyMeter(source, reason)
