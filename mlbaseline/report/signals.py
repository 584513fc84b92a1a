"""Danger signals and change-impact predictions: pure functions over results and telemetry.

Each signal is computed from measured data against a stated threshold and comes back as a
`Signal` (fired or quiet, or "not measured" when its input is absent), so the report can show the
value beside the threshold. Predictions are arithmetic on measured shares and measured sweep
settings only (never a model of the hardware) and are always labelled as predictions.

Definitions (thresholds are the module constants below):

- ``data_wait``: time-weighted share of `data_wait` in the training step,
  sum(data_wait)/sum(step), ≥ 20%: the loader cannot keep up (5–20% is reported as moderate).
- ``gpu_sawtooth``: GPU kernel-active % drops periodically. The telemetry series is split into
  runs of samples below 30% ("low") and above 70% ("high"), ignoring samples in between; a *dip*
  is a low run with a high run on both sides. Fires with ≥ 3 dips when low samples are ≥ 10% of
  all samples — the GPU repeatedly idles waiting for work (typically data loading or
  synchronisation). The period (lag of the first autocorrelation peak) is reported with it.
- ``gpu_low``: mean GPU kernel-active % below 50%.
  Both GPU signals judge the training windows when the throughput result records them, else the
  span from the first to the last sample in which a kernel ran (see :func:`gpu_span`), so the
  idle phases of a whole `mlb run` timeline do not count. (NVML's "utilization" means a
  kernel was running during the sample period; it is not SM or Tensor Core load.)
- ``tail_ratio``: latency p99/p50 > 3.
- ``cv``: the reported baseline's median is uncertain beyond ±3% (train step, inference batch,
  dataloader batch): not reproducible at the ±3% the baseline promises. It judges the baseline,
  not the per-step spread: with ≥ 2 fresh-process replicates, the 95% Student-t half-width of
  the mean of the per-replicate medians, relative to it; with one process it is *not measured*
  (on a shared machine most of the noise is between processes, and in-process samples cannot
  show it), whatever the in-process CV, which the message still quotes.
- ``thermal``: a GPU above `env_check.gpu_max_temp_c` (65 °C by default) or a thermal / power /
  hardware-slowdown throttle reason seen during the run.
- ``cpu_saturated``: in at least half of the telemetry samples, more than half of the cores
  are ≥ 95% busy: the CPUs (data workers, the main process) are the bottleneck.
- ``residual``: |sum(residual)/sum(total)| > 5%: the stage decomposition misses time.
- ``percentile_floor``: a latency distribution has fewer samples than a reported percentile
  needs (p90/p95/p99: 64/130/662, from `stats.PERCENTILE_FLOORS`).
- ``contaminated``: in some phase of a run, other programs used more CPU than
  `throughput.contamination_cores` (foreign cores = Δ busy CPU − Δ mlb's own process tree, per
  wall second; `measure.contamination`): the run marked itself contaminated.

The ``cv`` message also states, where the result has fresh-process replicates, the minimum
detectable effect of a comparison of two such results (`data["noise"]`, `stats.noise`) and
how much of the noise lies between processes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from mlbaseline import stats
from mlbaseline.comparison.advice import CLI, repeats_advice, source_of
from mlbaseline.documents.data_throughput import Noise
from mlbaseline.report.data import (
    Group,
    Telemetry,
    all_groups,
    finite,
    replicate_medians,
    share,
    stage_shares,
)
from mlbaseline.results import Result

DATA_WAIT_SHARE = 0.20
DATA_WAIT_MODERATE = 0.05
SAWTOOTH_LOW_PCT = 30.0
SAWTOOTH_HIGH_PCT = 70.0
SAWTOOTH_MIN_DIPS = 3
SAWTOOTH_MIN_LOW_FRACTION = 0.10
GPU_LOW_MEAN_PCT = 50.0
TAIL_RATIO = 3.0
CV_LIMIT = 0.03
DEFAULT_MAX_TEMP_C = 65.0
CPU_BUSY_PCT = 95.0
CPU_BUSY_CORE_FRACTION = 0.5  # "most cores": more than half
CPU_BUSY_SAMPLE_FRACTION = 0.5
RESIDUAL_SHARE = 0.05
PREDICTION_MIN_SHARE = 0.05
# NVML throttle reasons that slow a run down (idle, application clocks and display are not).
SLOWDOWN_REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")

SIGNAL_TITLES: dict[str, str] = {
    "data_wait": "Data wait ≥ 20% of the step",
    "gpu_sawtooth": "GPU kernel-active drops periodically (sawtooth)",
    "gpu_low": "GPU kernel-active low on average",
    "tail_ratio": "Latency tail: p99/p50 > 3",
    "cv": "Not reproducible: baseline median uncertain beyond ±3%",
    "thermal": "GPU hot or throttling during the run",
    "cpu_saturated": "CPUs saturated",
    "residual": "Decomposition incomplete: residual above 5%",
    "percentile_floor": "Too few samples for the reported percentiles",
    "contaminated": "Machine busy: other programs' CPU use above the limit",
}

# What to do when a signal fires, in one line (the report's headline lists fired signals with
# it). A signal whose remedy depends on the result (cv: how to take more processes, named in
# the terms its source offers) carries its own in `Signal.advice` instead.
SIGNAL_ACTIONS: dict[str, str] = {
    "data_wait": "the loader cannot keep up: more DataLoader workers (see the knee under "
    "Data loading), faster decoding, or caching decoded samples",
    "gpu_sawtooth": "the GPU repeatedly waits for work: look at data wait and host-to-device "
    "copies in the stage breakdown",
    "gpu_low": "the GPU idles most of the time: a larger batch, more loader workers, or fewer "
    "host synchronisations in the step",
    "tail_ratio": "the worst requests are dominated by queueing or pauses: lower the "
    "concurrency or find the stall (GC, lazy initialisation) in the request stage split",
    "cv": "more processes pin the median down, or a quieter machine",
    "thermal": "the GPU slowed itself down: cool it or wait until it is idle and cool, then "
    "measure again; figures from a throttled run are not a baseline",
    "cpu_saturated": "the CPUs are the bottleneck: fewer loader workers than cores, or "
    "lighter CPU-side transforms",
    "residual": "part of the step is not timed by any stage: look for work outside the timed "
    "blocks (logging, host syncs, metrics) in the training loop",
    "percentile_floor": "send more requests (latency.requests) before reading the high percentiles",
    "contaminated": "other programs shared the machine: measure again when it is idle; these "
    "figures include their load",
}


@dataclass(frozen=True)
class Signal:
    """One danger signal on one subject (a metric group, a GPU, the run)."""

    name: str
    fired: bool
    value: float | None
    threshold: float | None
    message: str
    subject: str = ""
    measured: bool = True
    advice: str = ""  # what to do, where it depends on the result (else SIGNAL_ACTIONS)

    @property
    def title(self) -> str:
        return SIGNAL_TITLES.get(self.name, self.name)

    @property
    def action(self) -> str:
        """What to do about this signal, in one line."""
        return self.advice or SIGNAL_ACTIONS.get(self.name, "")

    @property
    def state(self) -> str:
        if not self.measured:
            return "not measured"
        return "FIRED" if self.fired else "quiet"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "title": self.title, "state": self.state, "action": self.action}


def _not_measured(name: str, why: str, threshold: float | None = None) -> Signal:
    return Signal(name, False, None, threshold, f"not measured: {why}", measured=False)


# ---------------------------------------------------------------- step decomposition


def data_wait_signals(results: Sequence[Result]) -> list[Signal]:
    out = []
    for g in all_groups(results, "train"):
        s = share(g.stages.get("data_wait"), g.total)
        if s is None:
            continue
        level = (
            "high" if s >= DATA_WAIT_SHARE else "moderate" if s >= DATA_WAIT_MODERATE else "none"
        )
        msg = (
            f"{g.prefix}: data wait is {s:.1%} of the step (input-bound: {level}); "
            "more DataLoader workers, faster decode or caching would help"
            if s >= DATA_WAIT_SHARE
            else f"{g.prefix}: data wait is {s:.1%} of the step (input-bound: {level})"
        )
        out.append(Signal("data_wait", s >= DATA_WAIT_SHARE, s, DATA_WAIT_SHARE, msg, g.prefix))
    return out or [_not_measured("data_wait", "no training step decomposition", DATA_WAIT_SHARE)]


def residual_signals(results: Sequence[Result]) -> list[Signal]:
    out = []
    for family in ("train", "latency", "dataloader", "infer"):
        for g in all_groups(results, family):
            s = share(g.residual, g.total)
            if s is None:
                continue
            fired = abs(s) > RESIDUAL_SHARE
            msg = f"{g.prefix}: residual is {s:+.1%} of {g.total.name if g.total else 'the total'}"
            if fired:
                msg += " — the stages do not add up; a step part is not timed"
            out.append(Signal("residual", fired, s, RESIDUAL_SHARE, msg, g.prefix))
    return out or [
        _not_measured("residual", "no decomposed metric with a residual", RESIDUAL_SHARE)
    ]


def _cv_subjects(results: Sequence[Result]) -> list[tuple[str, Any]]:
    subjects = []
    for family in ("train", "infer"):
        subjects += [(g.prefix, g.total) for g in all_groups(results, family) if g.total]
    for g in all_groups(results, "dataloader"):
        batch = g.other.get("batch")
        if batch is not None:
            subjects.append((g.prefix, batch))
    return subjects


def replicates_for(cv: float, limit: float = CV_LIMIT) -> int:
    """The --repeats the cv signal advises at this between-process CV: the fewest replicates
    that pass the signal's own gate (see stats.replicates_for_half_width)."""
    return stats.replicates_for_half_width(cv, limit)


def _one_process_advice(result: Result, metric: str) -> str:
    """How to measure the spread between processes, naming only what made `result` offers
    (comparison.advice: `--repeats` for mlb throughput / mlb run, the user's own script for
    the library API and Lightning); mlb dataloader has no `--repeats` at all."""
    if metric.startswith("dataloader.") and source_of(result) == CLI:
        return "mlb dataloader runs one process; run it again to see that spread"
    return repeats_advice(source_of(result), 3)


def cv_signals(results: Sequence[Result]) -> list[Signal]:
    out = []
    from mlbaseline.report.payloads import noise_records

    for result in results:
        noise = noise_records([result])
        for _subject, metric in _cv_subjects([result]):
            reps = replicate_medians(metric)
            values = [v for v in metric.values if np.isfinite(v)]
            if len(reps) >= 2:
                how = repeats_advice(source_of(result), replicates_for(stats.summarize(reps).cv))
                remedy = f"at this noise: {how}, or quiet the machine"
                out.append(_replicate_cv_signal(metric.name, reps, noise.get(metric.name), remedy))
            elif len(values) >= 2:
                cv = stats.summarize(values).cv
                why = (
                    f"{metric.name}: one process only (in-process CV {cv:.1%} over {len(values)} "
                    "samples); the spread between processes, where most noise on a shared "
                    f"machine is, was not measured: {_one_process_advice(result, metric.name)}"
                )
                out.append(Signal("cv", False, None, CV_LIMIT, why, metric.name, measured=False))
    return out or [_not_measured("cv", "no throughput samples", CV_LIMIT)]


# What a fired cv signal means to the person reading it, in one sentence.
NOT_REPRODUCIBLE_MEANS = (
    "a rerun of this same code may land more than 3% away from these figures, so a compare "
    "against this baseline cannot tell a change of a few percent from noise"
)


def _replicate_cv_signal(
    name: str, reps: Sequence[float], noise: Noise | None, remedy: str
) -> Signal:
    cv = stats.summarize(reps).cv
    half = stats.relative_t_half_width(cv, len(reps))
    msg = f"{name}: median ±{half:.1%} (95% CI) over {len(reps)} replicate medians (CV {cv:.1%})"
    if noise is not None and noise.mde is not None:
        msg += (
            f"; {noise.between_share:.0%} of the variance between processes; a compare of "
            f"two such runs cannot see changes below {noise.mde:.1%} (MDE)"
        )
    fired = half > CV_LIMIT
    if fired:
        msg += f" — will not reproduce within ±3%: {NOT_REPRODUCIBLE_MEANS}; {remedy}"
    advice = f"{NOT_REPRODUCIBLE_MEANS}; {remedy}" if fired else ""
    return Signal("cv", fired, half, CV_LIMIT, msg, name, advice=advice)


# ---------------------------------------------------------------- latency


def tail_ratio_signals(results: Sequence[Result]) -> list[Signal]:
    out = []
    for g in all_groups(results, "latency"):
        if g.total is None:
            continue
        x = finite(g.total.values)
        if x.size < 2:
            continue
        p50, p99 = stats.percentile(x, 50), stats.percentile(x, 99)
        if p50 <= 0:
            continue
        ratio = p99 / p50
        msg = (
            f"{g.total.name}: p99/p50 = {ratio:.2f} "
            f"(p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms)"
        )
        if ratio > TAIL_RATIO:
            msg += " — a long tail: queueing, GC pauses or stalls dominate the worst requests"
        out.append(Signal("tail_ratio", ratio > TAIL_RATIO, ratio, TAIL_RATIO, msg, g.total.name))
    return out or [_not_measured("tail_ratio", "no latency result", TAIL_RATIO)]


def percentile_floor_signals(results: Sequence[Result]) -> list[Signal]:
    out = []
    floor = float(stats.PERCENTILE_FLOORS[99])
    for g in all_groups(results, "latency"):
        if g.total is None:
            continue
        n = len(g.total.values)
        short = [f"p{q:g}" for q, need in stats.PERCENTILE_FLOORS.items() if n < need]
        fired = bool(short)
        if fired:
            needs = ", ".join(
                f"p{q:g} needs {need}" for q, need in stats.PERCENTILE_FLOORS.items() if n < need
            )
            msg = f"{g.total.name}: {n} samples; unreliable: {', '.join(short)} ({needs})"
        else:
            msg = f"{g.total.name}: {n} samples, enough for p90/p95/p99"
        out.append(Signal("percentile_floor", fired, float(n), floor, msg, g.total.name))
    return out or [_not_measured("percentile_floor", "no latency result", floor)]


# ---------------------------------------------------------------- telemetry


def count_dips(
    series: np.ndarray, low: float = SAWTOOTH_LOW_PCT, high: float = SAWTOOTH_HIGH_PCT
) -> int:
    """Low runs (< low) with a high run (> high) on both sides; middle samples are ignored."""
    bands = [("L" if v < low else "H") for v in series if np.isfinite(v) and (v < low or v > high)]
    runs = [b for i, b in enumerate(bands) if i == 0 or b != bands[i - 1]]
    return sum(1 for i in range(1, len(runs) - 1) if runs[i] == "L")


def dominant_period(series: np.ndarray) -> int | None:
    """Lag (in samples) of the first local maximum of the autocorrelation after lag 1."""
    x = finite(series)
    if x.size < 8 or np.std(x) == 0:
        return None
    x = x - x.mean()
    ac = np.correlate(x, x, mode="full")[x.size - 1 :]
    ac = ac / ac[0]
    for lag in range(2, x.size // 2):
        if ac[lag] > ac[lag - 1] and ac[lag] >= ac[lag + 1] and ac[lag] > 0.2:
            return lag
    return None


def training_windows(results: Sequence[Result]) -> list[tuple[float, float]]:
    """Telemetry-clock windows (start, end) of the training batch sizes, where the throughput
    runner recorded them (`data["batch_sizes"][B]["train"]["telemetry_window_s"]`)."""
    from mlbaseline.report.payloads import batch_facts

    out = []
    for r in results:
        if r.kind != "throughput":
            continue
        for g in all_groups([r], "train"):
            window = batch_facts(r, g).window
            if window is not None:
                out.append(window)
    return out


def gpu_span(tel: Telemetry, windows: Sequence[tuple[float, float]]) -> tuple[Telemetry, str]:
    """The part of the timeline the GPU signals judge, and how it was chosen.

    A timeline of a whole `mlb run` also covers phases that leave the GPU idle (env-check,
    dataloader), which would make any GPU look idle. So: the recorded training windows when
    there are any; else the span from the first to the last sample in which a kernel ran
    (> 0%), trimming the idle head and tail."""
    if windows:
        keep = np.zeros(tel.n, dtype=bool)
        for a, b in windows:
            keep |= (tel.t >= a) & (tel.t <= b)
        if keep.any():
            return tel.select(keep), f"{len(windows)} training window(s)"
    active = np.zeros(tel.n, dtype=bool)
    for v in tel.gpu_active.values():
        active |= np.nan_to_num(v, nan=0.0) > 0
    if not active.any():
        return tel, "whole timeline (no kernel ever ran)"
    idx = np.flatnonzero(active)
    lo, hi = float(tel.t[idx[0]]), float(tel.t[idx[-1]])
    return tel.window(
        lo, hi
    ), f"t = {lo:.1f}–{hi:.1f} s, while kernels ran (training windows not recorded)"


def gpu_signals(
    telemetry: Telemetry | None, windows: Sequence[tuple[float, float]] = ()
) -> list[Signal]:
    if telemetry is None or not telemetry.has_gpu:
        why = "no GPU telemetry (CPU run, or telemetry off)"
        return [
            _not_measured("gpu_sawtooth", why, float(SAWTOOTH_MIN_DIPS)),
            _not_measured("gpu_low", why, GPU_LOW_MEAN_PCT),
        ]
    span, basis = gpu_span(telemetry, windows)
    out = []
    for gpu, series in span.gpu_active.items():
        x = finite(series)
        if x.size == 0:
            continue
        dips = count_dips(x)
        low_frac = float(np.mean(x < SAWTOOTH_LOW_PCT))
        fired = dips >= SAWTOOTH_MIN_DIPS and low_frac >= SAWTOOTH_MIN_LOW_FRACTION
        period = dominant_period(x)
        msg = (
            f"{gpu}: {dips} dips below {SAWTOOTH_LOW_PCT:.0f}% kernel-active, "
            f"{low_frac:.0%} of samples low ({basis})"
        )
        if period and span.n > 1:
            dt = float(np.nanmedian(np.diff(span.t)))
            msg += f", period ≈ {period * dt:.2f} s"
        if fired:
            msg += " — the GPU idles periodically, waiting for input or a synchronisation"
        out.append(Signal("gpu_sawtooth", fired, float(dips), float(SAWTOOTH_MIN_DIPS), msg, gpu))
        mean = float(x.mean())
        low = mean < GPU_LOW_MEAN_PCT
        msg = f"{gpu}: mean kernel-active {mean:.0f}% ({basis})"
        if low:
            msg += " — the GPU is idle much of the time; find what it waits for"
        out.append(Signal("gpu_low", low, mean, GPU_LOW_MEAN_PCT, msg, gpu))
    return out


def _max_temp(results: Sequence[Result]) -> float:
    for r in results:
        limit = (r.config.get("env_check") or {}).get("gpu_max_temp_c")
        if isinstance(limit, (int, float)):
            return float(limit)
    return DEFAULT_MAX_TEMP_C


def thermal_signals(results: Sequence[Result], telemetry: Telemetry | None) -> list[Signal]:
    limit = _max_temp(results)
    if telemetry is None or not (telemetry.gpu_temp or telemetry.gpu_throttle):
        return [_not_measured("thermal", "no GPU temperature or throttle telemetry", limit)]
    out = []
    for gpu in sorted(set(telemetry.gpu_temp) | set(telemetry.gpu_throttle)):
        temps = finite(telemetry.gpu_temp.get(gpu, []))
        hot = float(temps.max()) if temps.size else None
        reasons = sorted(
            {
                reason
                for cell in telemetry.gpu_throttle.get(gpu, [])
                for reason in cell.replace(";", "|").replace(",", "|").split("|")
                if reason.strip() in SLOWDOWN_REASONS
            }
        )
        fired = (hot is not None and hot > limit) or bool(reasons)
        parts = [f"max {hot:.0f} °C" if hot is not None else "temperature not read"]
        parts.append(f"throttle: {', '.join(reasons)}" if reasons else "no slowdown throttle")
        msg = f"{gpu}: " + "; ".join(parts)
        if fired:
            msg += " — clocks drop under heat or power limits; results are not representative"
        out.append(Signal("thermal", fired, hot, limit, msg, gpu))
    return out


def cpu_signals(telemetry: Telemetry | None) -> list[Signal]:
    if telemetry is None or not telemetry.cpu_cores:
        return [
            _not_measured("cpu_saturated", "no per-core CPU telemetry", CPU_BUSY_SAMPLE_FRACTION)
        ]
    m = telemetry.cpu_matrix()
    valid = np.isfinite(m).all(axis=0)
    if not valid.any():
        return [
            _not_measured("cpu_saturated", "CPU telemetry has only gaps", CPU_BUSY_SAMPLE_FRACTION)
        ]
    busy_cores = (m[:, valid] >= CPU_BUSY_PCT).mean(axis=0)  # share of cores busy, per sample
    frac = float(np.mean(busy_cores > CPU_BUSY_CORE_FRACTION))
    fired = frac >= CPU_BUSY_SAMPLE_FRACTION
    msg = f"{m.shape[0]} cores: more than half ≥ {CPU_BUSY_PCT:.0f}% busy in {frac:.0%} of samples"
    if fired:
        msg += " — CPU-bound: data workers and the main process compete for cores"
    return [Signal("cpu_saturated", fired, frac, CPU_BUSY_SAMPLE_FRACTION, msg, "cpu")]


def contamination_signals(results: Sequence[Result]) -> list[Signal]:
    """One per result that recorded its CPU account (`data["contamination"]`)."""
    out = []
    for r in results:
        info = r.data.get("contamination") if isinstance(r.data, dict) else None
        if not isinstance(info, dict) or info.get("max_foreign_cores") is None:
            continue
        value, limit = float(info["max_foreign_cores"]), float(info["threshold_cores"])
        fired = bool(info.get("contaminated"))
        # what made it: `mlb attach` and the library API write kind "throughput" too
        source = source_of(r)
        subject = r.kind if source == CLI else source
        msg = (
            f"{subject}: other programs used up to {value:.2f} cores "
            f"(in {info.get('worst_phase')}) over {len(info.get('phases') or [])} phases"
        )
        advice = ""
        if fired:  # the path's own advice (attach: `mlb ab --attach`); older files lack it
            advice = str(info.get("advice") or "rerun on a quiet machine or use `mlb ab`")
            msg += f" — the figures include their load; {advice}"
        out.append(Signal("contaminated", fired, value, limit, msg, subject, advice=advice))
    return out or [_not_measured("contaminated", "no CPU account in the results")]


def compute_signals(results: Sequence[Result], telemetry: Telemetry | None = None) -> list[Signal]:
    """Every danger signal, in report order; absent inputs give "not measured" entries."""
    return [
        *data_wait_signals(results),
        *gpu_signals(telemetry, training_windows(results)),
        *tail_ratio_signals(results),
        *cv_signals(results),
        *thermal_signals(results, telemetry),
        *cpu_signals(telemetry),
        *residual_signals(results),
        *percentile_floor_signals(results),
        *contamination_signals(results),
    ]


# ---------------------------------------------------------------- predictions


@dataclass(frozen=True)
class Prediction:
    """A change-impact estimate computed from measured data; never a measurement."""

    kind: str  # "amdahl" or "workers"
    subject: str
    text: str
    value: float  # predicted relative change of the subject's time (negative = faster)
    basis: str  # the measured figures it is computed from

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _label(stage: str) -> str:
    return stage.replace("_", " ")


def amdahl_predictions(results: Sequence[Result]) -> list[Prediction]:
    """Amdahl's law on measured shares: halving a stage of share s cuts the total by s/2.

    Always for data wait (when measured), plus every other stage with a share ≥ 5%.
    """
    out = []
    for family, total_word in (("train", "step"), ("latency", "request")):
        for g in all_groups(results, family):
            out += _amdahl_group(g, total_word)
    # per-sample loader time is wall time only without worker processes (in workers, samples
    # overlap), so the loader's split is predicted from its fewest-workers warm setting
    loaders = [g for g in all_groups(results, "dataloader") if g.workers is not None]
    plain = sorted((g for g in loaders if not g.variant), key=lambda g: g.workers or 0)
    if plain:
        out += _amdahl_group(plain[0], "sample load")
    return out


def _amdahl_group(g: Group, total_word: str) -> list[Prediction]:
    shares = {k: v for k, v in stage_shares(g).items() if k != "residual"}
    picked = [
        k for k, v in sorted(shares.items(), key=lambda kv: -kv[1]) if v >= PREDICTION_MIN_SHARE
    ]
    if "data_wait" in shares and "data_wait" not in picked:
        picked.insert(0, "data_wait")
    out = []
    for stage in picked:
        s = shares[stage]
        text = (
            f"Prediction: halving {_label(stage)} would cut the {total_word} ({g.prefix}) by "
            f"~{s / 2:.1%}; removing it entirely, by at most ~{s:.1%}"
        )
        of = g.total.name if g.total else total_word
        basis = f"measured share of {_label(stage)}: {s:.1%} of {of}"
        out.append(Prediction("amdahl", f"{g.prefix}.{stage}", text, -s / 2, basis))
    return out


def _loader_rate(g: Group) -> float | None:
    if g.rate is not None and g.rate.values:
        return float(np.median(g.rate.values))
    if g.total is not None and g.total.values:
        med = float(np.median(g.total.values))
        return 1.0 / med if med > 0 else None
    return None


def worker_predictions(
    results: Sequence[Result], cpu_by_workers: dict[int, float] | None = None
) -> list[Prediction]:
    """From the measured worker sweep: moving between neighbouring measured settings a → b
    changes data time per sample by rate_a/rate_b − 1 and CPU use by the measured difference.

    Only warm-cache settings without extra flags are used, so pairs differ in workers alone.
    `cpu_by_workers` maps workers → mean CPU % (of all cores) during that setting, when known.
    """
    sweep: dict[int, float] = {}
    for g in all_groups(results, "dataloader"):
        rate = _loader_rate(g)
        if g.workers is not None and not g.variant and rate:
            sweep.setdefault(g.workers, rate)
    ws = sorted(sweep)
    out = []
    for a, b in itertools.pairwise(ws):
        change = sweep[a] / sweep[b] - 1.0
        text = f"Prediction: {a} → {b} workers: data time {change:+.0%}"
        basis = f"measured {sweep[a]:.1f} → {sweep[b]:.1f} samples/s"
        cpu = cpu_by_workers or {}
        if a in cpu and b in cpu:
            text += f", CPU use {cpu[b] - cpu[a]:+.0f} points (% of usable CPUs)"
            basis += f"; CPU {cpu[a]:.0f}% → {cpu[b]:.0f}%"
        else:
            text += ", CPU not measured"
        out.append(Prediction("workers", f"dataloader.w{a}->w{b}", text, change, basis))
    return out
