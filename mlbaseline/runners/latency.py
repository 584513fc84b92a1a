"""`mlb latency`: batch-1 request latency under concurrency, closed and open loop, with an SLA
verdict; the reusable core of the latency phase of `mlb run`.

Per level (a closed loop of N clients `latency.cN`, or an open loop at a rate `latency.rQPS`):
1. untimed warm-up requests (`latency.warmup_requests`);
2. `latency.requests` timed requests (real threads, or the simulation for a `SimulatedService`);
3. the first and last `trim_fraction` of the requests **by send order** are set aside as warm-up
   and drain (kept in `Metric.warmup` and marked in the request log), never by value;
4. p50/p90/p95/p99, mean and max of the rest, each with a seeded bootstrap CI, over the
   successful requests; failed requests are counted and listed, never dropped silently.

Verdict: per level, p99 ≤ `sla_p99_s` and at most 1% failed requests (more than 1% without an
answer cannot meet a p99). In a sweep, the levels above the knee are warnings and the sweep
check fails only when no level meets the SLA; the knee is the highest concurrency whose p99
meets the SLA with every lower swept level meeting it too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from mlbaseline import stats
from mlbaseline.config import Config, LatencyConfig
from mlbaseline.envinfo import fingerprint
from mlbaseline.errors import ConfigError, UsageError
from mlbaseline.measure.clock import Clock, PerfClock
from mlbaseline.measure.latency import (
    NS,
    STAGES,
    LevelPlan,
    LevelRun,
    RequestRecord,
    Service,
    SimulatedService,
    default_late_threshold,
    run_requests,
    send_rate,
    simulate,
    trim_by_send_order,
    warm_up,
)
from mlbaseline.measure.memory import refuse_oversized_batches
from mlbaseline.measure.memory_step import PhasePeak
from mlbaseline.progress import Progress
from mlbaseline.results import Check, Metric, Result
from mlbaseline.yamlread import read_regular

QUANTILES = (50, 90, 95, 99)
MAX_ERROR_SHARE = 0.01  # more failures than this and the p99 cannot be met by anyone
HISTOGRAM_MAX_BINS = 60
OMISSION_RATIO = 2.0  # open/closed p99 ratio above which the gap is flagged
MAX_BODY_FILE_BYTES = 64 * 1024 * 1024  # a request body is read whole into memory once

LOOP_NOTES = {
    "closed": (
        "Closed loop: each client sends only when its previous answer is back, so while one "
        "request stalls its client sends nothing, and the requests that would have waited "
        "behind the stall are never measured (coordinated omission). Its percentiles describe "
        "the service as seen by N patient clients, not by users arriving on their own schedule."
    ),
    "open": (
        "Open loop: sends follow a seeded Poisson schedule whatever the answers do, and each "
        "latency is counted from the scheduled send time, so waiting behind a stall is charged "
        "to every request it delayed (no coordinated omission)."
    ),
}


def fmt_ms(seconds: float | None) -> str:
    """A latency for people: 0.0123 -> "12.3 ms", 1.99 -> "1,990 ms"."""
    if seconds is None:
        return "–"
    ms = seconds * 1e3
    return f"{ms:,.0f} ms" if ms >= 1000 else f"{ms:.3g} ms"


# ---------------------------------------------------------------- planning and validation


def plan_levels(cfg: Config) -> list[LevelPlan]:
    """The levels to measure, in order: closed-loop concurrencies (the sweep, or
    `concurrency`), then the open loop at `rate`. `loop: auto` runs the open loop when a rate
    is set and the closed loop when none is, or when a sweep is asked for too."""
    lat = cfg.latency
    sweep = sorted(set(lat.sweep))
    if any(c < 1 for c in sweep):
        raise UsageError("latency.sweep: concurrency levels must be ≥ 1")
    loop = lat.loop
    if loop in ("open", "both") and lat.rate is None:
        raise UsageError(f"latency.loop: '{loop}' needs latency.rate (--rate QPS)")
    if loop == "open" and sweep:
        raise UsageError(
            "latency.sweep: the sweep is over closed-loop concurrency; use --loop both to add "
            "an open loop at --rate"
        )
    closed = loop in ("closed", "both") or (loop == "auto" and (lat.rate is None or bool(sweep)))
    open_ = loop in ("open", "both") or (loop == "auto" and lat.rate is not None)
    seed = cfg.golden.seed
    plans = [LevelPlan("closed", c, lat.requests, seed=seed) for c in (sweep or [lat.concurrency])]
    if not closed:
        plans = []
    if open_:
        plans.append(LevelPlan("open", lat.concurrency, lat.requests, lat.rate, seed))
    return plans


def read_body(lat: LatencyConfig) -> bytes | None:
    """The endpoint request body: `body` (UTF-8 text) or the bytes of `body_file`."""
    if lat.body is not None and lat.body_file is not None:
        raise UsageError("latency.body and latency.body_file: give one, not both")
    if lat.url is None and (lat.body is not None or lat.body_file is not None):
        raise UsageError("latency.body: a request body needs an endpoint (--url)")
    if lat.body is not None:
        return lat.body.encode("utf-8")
    if lat.body_file is not None:
        path = Path(lat.body_file)
        try:  # bounded: `--body-file /dev/zero` would otherwise read until memory runs out
            return read_regular(path, MAX_BODY_FILE_BYTES)
        except FileNotFoundError:
            raise ConfigError(f"latency.body_file: {path}: no such file") from None
        except OSError as exc:
            raise ConfigError(f"latency.body_file: {path}: cannot read ({exc.strerror})") from None
        except ValueError as exc:  # not a regular file, or over the cap
            raise ConfigError(f"latency.body_file: {path}: {exc}") from None
    return None


def build_service(cfg: Config, body: bytes | None) -> Service:
    """The HTTP endpoint when `latency.url` is set, else the configured model."""
    from mlbaseline.measure import latency_services as ls
    from mlbaseline.workloads.service import build_model_service

    lat = cfg.latency
    if lat.url is not None:
        return ls.HttpService(
            lat.url, lat.method, body, lat.content_type, lat.timeout_s, lat.max_response_bytes
        )
    return build_model_service(cfg)


# ---------------------------------------------------------------- the runner


def run_latency(
    cfg: Config,
    progress: Progress,
    clock: Clock | None = None,
    service: Service | SimulatedService | None = None,
) -> Result:
    """Measure every planned level and return a `latency` result (never raises for a fault
    during measurement: a crash marks it failed, Ctrl-C marks it interrupted, and the levels
    measured so far are kept). Bad input raises UsageError/ConfigError before anything runs."""
    lat = cfg.latency
    plans = plan_levels(cfg)
    body = read_body(lat)
    if lat.url is not None and service is None:
        from mlbaseline.measure.latency_services import parse_endpoint

        parse_endpoint(lat.url)  # exit 2 before any model or socket exists
    if lat.url is None and service is None:  # the host, before torch is even imported
        refuse_oversized_batches(cfg, "latency.batch_size", [lat.batch_size], service=True)
    result = Result(kind="latency", config=cfg.to_dict())
    result.data = _initial_data(cfg)
    own = service is None
    try:
        if lat.url is None and service is None:
            from mlbaseline.measure.determinism import set_determinism

            w = cfg.workload
            flags = set_determinism(cfg.golden.seed, w.deterministic, w.cudnn_benchmark)
            result.data["determinism"] = flags
        if service is None:
            service = build_service(cfg, body)
        description = service.describe()
        result.data["service"] = description
        result.environment = fingerprint(cfg.to_dict(), None, str(description.get("device", "cpu")))
        # the serving process is this one only for the in-process model service
        serving = lat.url is None and not isinstance(service, SimulatedService)
        peak = PhasePeak(str(description.get("device", "cpu"))) if serving else None
        for plan in plans:
            run = _measure(plan, service, clock or PerfClock(), lat, progress)
            _record_level(result, run, cfg)
            if run.interrupted:
                done = len(run.records)
                result.mark("interrupted", f"{plan.key}: interrupted after {done} requests")
                break
            if run.error is not None:
                result.mark("failed", f"{plan.key}: {run.error}")
                break
        memory = peak.metric("latency.mem.peak", "latency") if peak is not None else None
        if memory is not None:
            result.add_metric(memory)
    except KeyboardInterrupt:
        result.mark("interrupted", "interrupted before a level finished its warm-up")
    finally:
        if own and service is not None:
            service.close()
    _finish(result, cfg, plans)
    return result


def _initial_data(cfg: Config) -> dict[str, Any]:
    lat = cfg.latency
    return {
        "mode": "endpoint" if lat.url else "model",
        "percentile_method": stats.PERCENTILE_METHOD,
        "quantiles": list(QUANTILES),
        "confidence": cfg.compare.confidence,
        "ci_method": "seeded percentile bootstrap (stats.percentile_ci, stats.bootstrap_ci)",
        "trim": {"fraction": lat.trim_fraction, "order": "send order (request index)"},
        "sla_p99_s": lat.sla_p99_s,
        "max_error_share": MAX_ERROR_SHARE,
        "loop_notes": LOOP_NOTES,
        "levels": {},
    }


def _measure(
    plan: LevelPlan,
    service: Service | SimulatedService,
    clock: Clock,
    lat: LatencyConfig,
    progress: Progress,
) -> LevelRun:
    what = (
        f"{plan.loop} loop, {plan.concurrency} {'clients' if plan.loop == 'closed' else 'workers'}"
    )
    if plan.rate is not None:
        what += f", {plan.rate:g} req/s"
    with progress.task(f"latency {plan.key} ({what})", total=plan.requests) as task:
        shown = [0]

        def advance(done: int) -> None:
            if done > shown[0]:
                task.advance(done - shown[0])
                shown[0] = done

        if isinstance(service, SimulatedService):
            return simulate(plan, service, on_progress=advance)
        warm = warm_up(service, lat.warmup_requests)
        run = run_requests(plan, service, clock, on_progress=advance)
        run.warmup = warm
        return run


# ---------------------------------------------------------------- analysis of one level


def distribution(
    values: list[float], confidence: float, n_resamples: int, seed: int
) -> dict[str, Any]:
    """p50/p90/p95/p99, mean and max with seeded percentile-bootstrap CIs."""
    x = np.asarray(values, dtype=np.float64)
    out: dict[str, Any] = {"n": int(x.size)}
    point = stats.percentiles(x, QUANTILES)
    for q in QUANTILES:
        key = stats.percentile_key(q)
        lo, hi = stats.percentile_ci(x, q, confidence, n_resamples, seed)
        out[key] = {"value": point[key], "ci": [lo, hi]}
    for name, fn in (("mean", np.mean), ("max", np.max)):
        lo, hi = stats.bootstrap_ci(x, fn, confidence, n_resamples, seed, vectorized=True)
        out[name] = {"value": float(fn(x)), "ci": [lo, hi]}
    return out


def histogram(values: list[float]) -> dict[str, Any]:
    """Bin edges and counts of the measured latencies, for the report (numpy's "auto" bins,
    at most HISTOGRAM_MAX_BINS)."""
    x = np.asarray(values, dtype=np.float64)
    edges = np.histogram_bin_edges(x, bins="auto")
    if edges.size - 1 > HISTOGRAM_MAX_BINS:
        edges = np.linspace(x.min(), x.max(), HISTOGRAM_MAX_BINS + 1)
    counts, edges = np.histogram(x, bins=edges)
    return {"unit": "s", "edges": edges.tolist(), "counts": counts.tolist()}


def _stage_split(kept: list[RequestRecord]) -> dict[str, Any]:
    """Per stage: median, p99, mean and the share of the mean total, so that a service-level
    p99 can be told apart from model time."""
    total_mean = float(np.mean([r.seconds("total") for r in kept]))
    out: dict[str, Any] = {}
    for part in (*STAGES, "residual"):
        x = np.asarray([r.seconds(part) for r in kept])
        mean = float(np.mean(x))
        out[part] = {
            "median": float(np.median(x)),
            "p99": stats.percentile(x, 99),
            "mean": mean,
            "share_of_mean": mean / total_mean if total_mean > 0 else 0.0,
        }
    return out


def _metrics(
    prefix: str, kept: list[RequestRecord], trimmed: list[RequestRecord], trim: dict[str, Any]
) -> Iterator[Metric]:
    """The metric group of one level: total, the four stages and the residual, aligned per
    request; the trimmed head and tail (successful ones, in send order) go in `warmup`."""
    base = {"group": prefix, "unit_note": "seconds per request", "trim": trim}
    # (metric name, RequestRecord part, meta): the total, each stage, then the residual
    parts: list[tuple[str, str, dict[str, Any]]] = [
        ("request", "total", {"role": "total", "stages": list(STAGES)})
    ]
    parts += [(stage, stage, {"role": "stage", "stage": stage}) for stage in STAGES]
    parts.append(("residual", "residual", {"role": "residual"}))
    for name, part, meta in parts:
        yield Metric(
            f"{prefix}.{name}",
            "s",
            False,
            [r.seconds(part) for r in kept],
            warmup=[r.seconds(part) for r in trimmed],
            meta={**base, **meta},
        )


def _request_log(run: LevelRun, k_head: int, k_tail: int) -> dict[str, list[Any]]:
    """Every request, column-wise, in send order: times in seconds (ns resolution) relative to
    the level start; `phase` says which were trimmed as warm-up or drain."""
    n = len(run.records)
    phases = ["warmup"] * k_head + ["measured"] * (n - k_head - k_tail) + ["drain"] * k_tail
    cols: dict[str, list[Any]] = {
        "index": [r.index for r in run.records],
        "client": [r.client for r in run.records],
        "phase": phases,
        "scheduled_s": [round(r.scheduled_ns / NS, 9) for r in run.records],
        "sent_s": [round(r.start_ns / NS, 9) for r in run.records],
        "latency_s": [round(r.seconds("total"), 9) for r in run.records],
    }
    for part in (*STAGES, "residual"):
        cols[f"{part}_s"] = [round(r.seconds(part), 9) for r in run.records]
    cols["ok"] = [r.ok for r in run.records]
    cols["error"] = [r.error for r in run.records]
    cols["detail"] = [r.detail for r in run.records]
    cols["status"] = [r.status for r in run.records]
    return cols


def _open_loop_rates(run: LevelRun, lat: LatencyConfig) -> dict[str, Any]:
    plan = run.plan
    assert plan.rate is not None
    threshold = lat.late_threshold_s or default_late_threshold(plan.rate)
    lateness = [r.queue_ns / NS for r in run.records]
    late = sum(1 for v in lateness if v > threshold)
    n = len(run.records)
    return {
        "target_rate": plan.rate,
        "schedule_rate": send_rate([r.scheduled_ns for r in run.records]),
        "achieved_rate": send_rate([r.start_ns for r in run.records]),
        "late_threshold_s": threshold,
        "late_threshold_rule": "min(1 ms, 10% of the mean inter-arrival) unless configured",
        "late_count": late,
        "late_share": late / n if n else None,
        "max_lateness_s": max(lateness, default=None),
    }


def _record_level(result: Result, run: LevelRun, cfg: Config) -> None:
    lat, plan = cfg.latency, run.plan
    trimmed = trim_by_send_order(run.records, lat.trim_fraction)
    kept = [r for r in trimmed.kept if r.ok]
    aside = [r for r in (*trimmed.head, *trimmed.tail) if r.ok]
    n = len(run.records)
    failed = [r for r in run.records if not r.ok]
    trim = {"head": len(trimmed.head), "tail": len(trimmed.tail), "order": "send"}
    level: dict[str, Any] = {
        "key": plan.key,
        "prefix": plan.prefix,
        "loop": plan.loop,
        "concurrency": plan.concurrency,
        "rate": plan.rate,
        "engine": run.engine,
        "requests_planned": plan.requests,
        "completed": n,
        "warmup_requests": run.warmup,
        "trim": {**trim, "kept": len(trimmed.kept), "kept_ok": len(kept)},
        "errors": {
            "count": len(failed),
            "share": len(failed) / n if n else 0.0,
            "by_kind": dict(Counter(r.error for r in failed)),
        },
        "duration_s": run.duration_ns / NS,
        "throughput_rps": n / (run.duration_ns / NS) if run.duration_ns > 0 else None,
        "interrupted": run.interrupted,
        "error": run.error,
    }
    if plan.loop == "open":
        level.update(_open_loop_rates(run, lat))
    if kept:
        for metric in _metrics(plan.prefix, kept, aside, trim):
            result.add_metric(metric)
        totals = [r.seconds("total") for r in kept]
        c = cfg.compare
        level["stats"] = distribution(totals, c.confidence, c.n_resamples, cfg.golden.seed)
        level["stages"] = _stage_split(kept)
        level["histogram"] = histogram(totals)
        p99 = level["stats"]["p99"]["value"]
        level["sla"] = {"p99_s": p99, "threshold_s": lat.sla_p99_s, "met": p99 <= lat.sla_p99_s}
        for w in stats.percentile_floor_warnings(len(kept), f"{plan.prefix}.request"):
            result.warn(w.code, w.message, metric=w.metric, value=w.value, threshold=w.threshold)
    else:
        level["sla"] = {"p99_s": None, "threshold_s": lat.sla_p99_s, "met": False}
        result.warn("no_samples", f"{plan.prefix}: no successful request left after trimming")
    level["requests"] = _request_log(run, len(trimmed.head), len(trimmed.tail))
    _late_warning(result, level)
    result.data["levels"][plan.key] = level


def _late_warning(result: Result, level: dict[str, Any]) -> None:
    share = level.get("late_share")
    if share is None or share <= 0.1:
        return
    result.warn(
        "late_sends",
        f"{level['prefix']}: {share:.0%} of sends started more than "
        f"{fmt_ms(level['late_threshold_s'])} after their schedule (target "
        f"{level['target_rate']:g} req/s, achieved {level['achieved_rate'] or 0:.3g}): the "
        f"{level['concurrency']} worker(s) could not keep up, and the wait is in the latencies",
        metric=f"{level['prefix']}.queue",
        value=share,
    )


# ---------------------------------------------------------------- verdicts across levels


def _finish(result: Result, cfg: Config, plans: list[LevelPlan]) -> None:
    levels = result.data["levels"]
    closed = [levels[p.key] for p in plans if p.loop == "closed" and p.key in levels]
    sweeping = bool(cfg.latency.sweep)
    knee = _sweep(result, closed) if sweeping else None
    for level in levels.values():
        result.verdict.checks.extend(_level_checks(level, sweeping, knee))
    if sweeping:
        result.verdict.checks.append(_sweep_check(result.data["sweep"], cfg.latency.sla_p99_s))
    _omission(result, plans)


def _level_checks(level: dict[str, Any], sweeping: bool, knee: int | None) -> list[Check]:
    key, sla = level["key"], level["sla"]
    threshold = sla["threshold_s"]
    if sla["p99_s"] is None:
        sla_check = Check(f"sla.{key}", "fail", None, threshold, f"{key}: no successful request")
    else:
        met = sla["met"]
        relation = "≤" if met else ">"
        status = "pass" if met else "fail"
        if sweeping and level["loop"] == "closed" and not met:
            status = "warn"  # a sweep is meant to go past the knee; the sweep check decides
        msg = f"{key}: p99 {fmt_ms(sla['p99_s'])} {relation} SLA {fmt_ms(threshold)}"
        if status == "warn":
            msg += f" (above the sweep's knee, {knee})"
        sla_check = Check(f"sla.{key}", status, sla["p99_s"], threshold, msg)
    err = level["errors"]
    share = err["share"]
    if share > MAX_ERROR_SHARE:
        status, msg = "fail", f"{key}: {share:.1%} of requests failed (> 1%: p99 cannot be met)"
    elif share > 0:
        status, msg = "warn", f"{key}: {err['count']} failed request(s) ({share:.2%})"
    else:
        status, msg = "pass", f"{key}: no failed requests"
    detail = ", ".join(f"{k} ×{v}" for k, v in err["by_kind"].items())
    if detail:
        msg += f": {detail}"
    return [sla_check, Check(f"errors.{key}", status, share, MAX_ERROR_SHARE, msg)]


def _sweep(result: Result, closed: list[dict[str, Any]]) -> int | None:
    """The knee: the highest concurrency whose p99 meets the SLA with every lower swept level
    meeting it too. A level that passes again above a failing one is listed, with a warning
    (noise or a non-monotone service), but does not move the knee."""
    ordered = sorted(closed, key=lambda lv: lv["concurrency"])
    knee = None
    for level in ordered:
        if not level["sla"]["met"]:
            break
        knee = level["concurrency"]
    passing = [lv["concurrency"] for lv in ordered if lv["sla"]["met"]]
    result.data["sweep"] = {
        "levels": [lv["concurrency"] for lv in ordered],
        "p99_s": {str(lv["concurrency"]): lv["sla"]["p99_s"] for lv in ordered},
        "meets_sla": {str(lv["concurrency"]): lv["sla"]["met"] for lv in ordered},
        "passing": passing,
        "knee": knee,
        "rule": "highest concurrency whose p99 meets the SLA, with every lower level meeting it",
    }
    above = [c for c in passing if knee is None or c > knee]
    if above:
        result.warn(
            "non_monotone_sweep",
            f"latency sweep: concurrency {above} meets the SLA although a lower level does not; "
            f"the knee stays at {knee}",
            value=above,
        )
    return knee


def _sweep_check(sweep: dict[str, Any], sla: float) -> Check:
    knee = sweep["knee"]
    if knee is None:
        msg = f"no swept concurrency meets the p99 SLA of {fmt_ms(sla)}"
        return Check("sla.sweep", "fail", None, sla, msg)
    msg = f"highest concurrency meeting the p99 SLA of {fmt_ms(sla)}: {knee}"
    return Check("sla.sweep", "pass", knee, sla, msg)


def _omission(result: Result, plans: list[LevelPlan]) -> None:
    """When both loops ran, compare their p99 and explain what the closed loop hides."""
    levels = result.data["levels"]
    open_ = next((levels[p.key] for p in plans if p.loop == "open" and p.key in levels), None)
    closed = [levels[p.key] for p in plans if p.loop == "closed" and p.key in levels]
    if open_ is None or not closed or "stats" not in open_:
        return
    same = [lv for lv in closed if lv["concurrency"] == open_["concurrency"]]
    ref = (same or closed)[0]
    if "stats" not in ref:
        return
    c99, o99 = ref["stats"]["p99"]["value"], open_["stats"]["p99"]["value"]
    ratio = o99 / c99 if c99 > 0 else None
    sustained = ref.get("throughput_rps")
    overloaded = bool(sustained and open_["rate"] > 0.9 * sustained)
    explanation = (
        f"open-loop p99 ({open_['key']}, {fmt_ms(o99)}) vs closed-loop p99 ({ref['key']}, "
        f"{fmt_ms(c99)}). {LOOP_NOTES['closed']} Users arriving on their own schedule see "
        f"the open-loop figure."
    )
    if overloaded:
        explanation += (
            f" Note: the open loop's rate ({open_['rate']:g} req/s) is near or above what the "
            f"closed loop sustained ({sustained:.3g} req/s), so part of the gap is overload."
        )
    result.data["coordinated_omission"] = {
        "closed": ref["key"],
        "open": open_["key"],
        "closed_p99_s": c99,
        "open_p99_s": o99,
        "ratio": ratio,
        "threshold_ratio": OMISSION_RATIO,
        "flagged": bool(ratio is not None and ratio > OMISSION_RATIO),
        "closed_throughput_rps": sustained,
        "open_rate": open_["rate"],
        "overloaded": overloaded,
        "explanation": explanation,
    }
    if ratio is not None and ratio > OMISSION_RATIO:
        result.warn(
            "coordinated_omission",
            f"the closed-loop p99 hides {ratio:.1f}× of the tail: {explanation}",
            value=ratio,
            threshold=OMISSION_RATIO,
        )
