"""What a DataLoader sweep means: the plan, the knee, the recommendation, the input-bound verdict.

The module imports no torch (the report reuses `input_bound_verdict`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mlbaseline.config import Config
from mlbaseline.measure import io as iomod
from mlbaseline.results import Check, Result
from mlbaseline.runners.dataloader_passes import Source

MIN_BATCHES = 16  # the floor: 1024 samples at batch 64
INPUT_BOUND_MODERATE = 0.05
INPUT_BOUND_HIGH = 0.20
COLD_MIN_STORAGE_SHARE = 0.10  # a cold pass that fetched less than this from storage was not cold


# ---------------------------------------------------------------- verdicts and rules


def input_bound_verdict(data_wait_share: float) -> tuple[str, str]:
    """(level, message) for the share of training step time spent waiting for data:
    below 5% "none", 5–20% "moderate", 20% and above "high"."""
    share = float(data_wait_share)
    if not math.isfinite(share) or share < 0:
        raise ValueError(f"data-wait share must be a finite number ≥ 0, got {data_wait_share!r}")
    pct = f"{share:.1%}"
    if share < INPUT_BOUND_MODERATE:
        return "none", f"data wait is {pct} of step time: not input-bound"
    if share < INPUT_BOUND_HIGH:
        return (
            "moderate",
            f"data wait is {pct} of step time: moderately input-bound; more DataLoader "
            "workers or cheaper decode/transform would shorten the step",
        )
    return (
        "high",
        f"data wait is {pct} of step time: strongly input-bound; the model waits for data: "
        "raise num_workers, cache decoded samples or use a faster decoder first",
    )


_TRAIN_METRIC = re.compile(r"^train\.bs(\d+)\.(data_wait|step)$")


def data_wait_shares(throughput: Result) -> dict[int, dict[str, Any]]:
    """Per training batch size: Σ data_wait / Σ step over the measured steps of a throughput
    result (metrics `train.bs{B}.data_wait` and `train.bs{B}.step`)."""
    found: dict[int, dict[str, list[float]]] = {}
    for name, metric in throughput.measurements.items():
        m = _TRAIN_METRIC.match(name)
        if m:
            found.setdefault(int(m.group(1)), {})[m.group(2)] = metric.values
    out: dict[int, dict[str, Any]] = {}
    for bs, pair in sorted(found.items()):
        wait, step = pair.get("data_wait"), pair.get("step")
        if not wait or not step:
            continue
        n = min(len(wait), len(step))
        total = sum(step[:n])
        if total <= 0:
            continue
        share = sum(wait[:n]) / total
        out[bs] = {"share": share, "steps": n, "level": input_bound_verdict(share)[0]}
    return out


def input_bound_check(
    throughput: Result, batch_size: int, knee: int | None
) -> tuple[Check, dict[str, Any]]:
    """The input-bound verdict from a throughput result: at the dataloader's batch size when
    it was trained at, else at the batch size with the highest share."""
    shares = data_wait_shares(throughput)
    workers = (throughput.config.get("throughput") or {}).get("num_workers")
    data: dict[str, Any] = {"per_batch_size": shares, "throughput_num_workers": workers}
    if not shares:
        msg = "the throughput result has no train.bs*.data_wait/step metrics (inference only?)"
        data["message"] = msg
        return Check("input_bound", "skip", None, None, msg), data
    bs = batch_size if batch_size in shares else max(shares, key=lambda b: shares[b]["share"])
    share = shares[bs]["share"]
    level, message = input_bound_verdict(share)
    message = f"training at batch {bs} (num_workers={workers}): {message}"
    if level != "none" and knee is not None:
        message += f"; the knee measured here is num_workers={knee}"
    data.update(batch_size=bs, share=share, level=level, message=message)
    status = "pass" if level == "none" else "warn"
    return Check(
        "input_bound", status, share, [INPUT_BOUND_MODERATE, INPUT_BOUND_HIGH], message
    ), data


def rule_of_thumb(cpus: int) -> int:
    """The common num_workers rule of thumb: min(64, 2·cpus + 1)."""
    return min(64, 2 * cpus + 1)


def cap_workers(requested: Sequence[int], cpus: int) -> tuple[list[int], list[int]]:
    """Worker counts capped at the usable CPUs, deduplicated in order; and the ones capped."""
    capped = [w for w in requested if w > cpus]
    out: list[int] = []
    for w in requested:
        v = min(w, cpus)
        if v not in out:
            out.append(v)
    return out, capped


def find_knee(rates: Mapping[int, float], tolerance: float) -> int | None:
    """The smallest worker count whose throughput is within `tolerance` of the best."""
    valid = {w: r for w, r in rates.items() if r is not None and math.isfinite(r) and r > 0}
    if not valid:
        return None
    best = max(valid.values())
    return min(w for w, r in valid.items() if r >= (1.0 - tolerance) * best)


# ---------------------------------------------------------------- the plan


@dataclass
class Plan:
    batch_size: int
    workers: list[int]
    pins: list[bool]
    device: str
    cpus: int
    cold: bool
    n_batches: int


def plan_sweep(cfg: Config, source: Source, result: Result, device: str) -> Plan:
    from mlbaseline.envinfo import affinity_cpus, cgroup_cpu_quota, usable_cpus

    dl = cfg.dataloader
    cpus = usable_cpus()
    workers, capped = cap_workers(dl.workers, cpus)
    if capped:
        result.warn(
            "workers_capped",
            f"dataloader.workers {', '.join(map(str, capped))} exceed the {cpus} CPUs this "
            f"process may use (affinity {affinity_cpus()}, cgroup quota "
            f"{cgroup_cpu_quota() or 'none'}); capped at {cpus}",
            requested=list(dl.workers),
            usable_cpus=cpus,
        )
    pins = list(dict.fromkeys(dl.pin_memory))
    if not device.startswith("cuda"):
        if True in pins:
            result.warn(
                "pin_memory_not_applicable",
                "pin_memory: not applicable on CPU (no CUDA device to copy to); only "
                "pin_memory=False was measured",
            )
        pins = [False]
    bs = dl.batch_size or cfg.golden.batch_size
    if dl.batches < MIN_BATCHES:
        result.warn(
            "few_batches",
            f"dataloader.batches={dl.batches} is below {MIN_BATCHES}: medians and CIs rest on "
            "few batches",
        )
    cold = dl.cold_cache and source.split
    if dl.cold_cache and not source.split:
        result.warn(
            "cold_not_applicable",
            "cold cache: not applicable: the dataset does not expose its files",
        )
    elif cold and not iomod.eviction_supported():
        result.warn(
            "cold_not_supported",
            "cold cache: posix_fadvise is not available on this platform; skipped",
        )
        cold = False
    n = len(source.dataset)
    needed = (dl.batches + max(1, max(workers))) * bs
    if needed > n:
        result.warn(
            "dataset_cycled",
            f"the dataset has {n} samples and a pass needs up to {needed}: samples are read "
            "more than once (cycled); warm figures are unaffected, and the cold pass evicts "
            "each file before every read",
            samples=n,
            needed=needed,
        )
    return Plan(bs, workers, pins, device, cpus, cold, dl.batches)


# ---------------------------------------------------------------- reading the sweep


def knee_summary(cfg: Config, rows: Sequence[Mapping[str, Any]], plan: Plan) -> dict[str, Any]:
    """The knee over the warm passes (pin_memory off when it was measured)."""
    pin = False not in plan.pins  # pin_memory off when it was measured
    chosen = [
        r for r in rows if r["status"] == "ok" and r["cache"] == "warm" and r["pin_memory"] == pin
    ]
    rates = {r["workers"]: r["samples_per_s"]["median"] for r in chosen}
    util = {r["workers"]: r["cpu_util"] for r in chosen}
    knee = find_knee(rates, cfg.dataloader.knee_tolerance)
    thumb = rule_of_thumb(plan.cpus)
    out: dict[str, Any] = {
        "workers": knee,
        "tolerance": cfg.dataloader.knee_tolerance,
        "pin_memory": pin,
        "rates": rates,
        "cpu_util": util,
        "rule_of_thumb": {"formula": "min(64, 2·cpus + 1)", "cpus": plan.cpus, "value": thumb},
    }
    if knee is not None:
        best = max((w for w in rates if rates[w]), key=lambda w: rates[w])
        out.update(samples_per_s=rates[knee], best_workers=best, best_samples_per_s=rates[best])
    return out


def recommendation(
    knee: Mapping[str, Any],
    plan: Plan,
    pin_effect: Mapping[str, Any] | None,
    persistent: Sequence[Mapping[str, Any]],
) -> str:
    """One line: the worker count to use, why, and what pin/persistent workers do here."""
    k = knee.get("workers")
    if k is None:
        return "no setting produced a throughput figure: no recommendation"
    tol = f"{knee['tolerance']:.0%}"
    thumb = knee["rule_of_thumb"]
    util = knee["cpu_util"].get(k)
    util_text = f", CPU use {util:.0%} of {plan.cpus}" if util is not None else ""
    line = (
        f"num_workers={k}: within {tol} of the best {knee['best_samples_per_s']:.4g} samples/s "
        f"(at {knee['best_workers']} workers){util_text}; rule of thumb "
        f"min(64, 2·{thumb['cpus']}+1)={thumb['value']}"
    )
    if pin_effect and pin_effect.get("applicable") and pin_effect.get("saved_s") is not None:
        saved = pin_effect["saved_s"]
        verb = "saves" if saved > 0 else "costs"
        line += f"; pin_memory=True {verb} {abs(saved) * 1e3:.3g} ms of host→device copy per batch"
    elif pin_effect and not pin_effect.get("applicable"):
        line += "; pin_memory: not applicable on CPU"
    at_k = next((p for p in persistent if p["workers"] == k), None)
    if at_k and at_k.get("saved_s") is not None and k > 0:
        line += f"; persistent_workers=True saves {at_k['saved_s']:.3g} s per epoch start"
    return line


def pin_memory_effect(
    rows: Sequence[Mapping[str, Any]], plan: Plan, knee: int | None
) -> dict[str, Any]:
    if not plan.device.startswith("cuda"):
        return {
            "applicable": False,
            "reason": "no CUDA device: there is no host→device copy for pinned memory to speed up",
        }
    warm = {
        (r["workers"], r["pin_memory"]): r
        for r in rows
        if r["status"] == "ok" and r["cache"] == "warm"
    }
    w = knee if knee is not None else (plan.workers[0] if plan.workers else 0)
    off, on = warm.get((w, False)), warm.get((w, True))
    out: dict[str, Any] = {"applicable": True, "workers": w}
    if off and on:
        h_off, h_on = off["stage_median_s"]["h2d"], on["stage_median_s"]["h2d"]
        out.update(
            h2d_off_s=h_off,
            h2d_on_s=h_on,
            saved_s=None if h_off is None or h_on is None else h_off - h_on,
            pin_memory_s=on["stage_median_s"]["pin_memory"],
        )
    else:
        out["note"] = "pin_memory was not measured both on and off"
    return out


def cold_check(result: Result, rows: Sequence[Mapping[str, Any]]) -> None:
    """A cold pass that fetched almost nothing from storage did not evict (tmpfs, overlay or
    a network file system): say so instead of reporting warm figures as cold."""
    for row in rows:
        if row.get("cache") != "cold" or row.get("status") != "ok" or not row.get("io"):
            continue
        wanted = row["bytes_read_by_dataset"]
        got = row["io"]["read_bytes"]
        if wanted and got < COLD_MIN_STORAGE_SHARE * wanted:
            result.warn(
                "cold_not_cold",
                f"{row['key']}: the cold pass fetched {got} B from storage for {wanted} B read: "
                "the page-cache eviction did not take effect here (tmpfs/overlay/network file "
                "system?), so its figures are not cold",
            )
            return
