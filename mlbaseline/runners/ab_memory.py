"""Memory in `mlb ab` (issue 28): the arms' memory metrics, judged B against A by the memory
rule of `mlb compare`.

Where the arms' steps carry memory (`StepTimes.memory`, from the stage timer's recorder):
`ab.<arm>.mem.peak`, `.mem.reserved` (CUDA) and `.mem.<stage>` (the bytes the stage left held;
`mem.forward` is the activations), one value per finished pair. They are not paired-tested:
memory is nearly deterministic, so `stats.decision.memory_rule` (the ratio of medians B/A
widened by the measured spread, through the one decision function, at
`compare.memory_threshold`) judges each; the stage whose held memory regressed most is named.
A memory verdict counts in the overall verdict and a regressed one fails, as a stage does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlbaseline import stats
from mlbaseline.comparison.memory import RULE as MEMORY_RULE
from mlbaseline.comparison.memory import memory_sentence
from mlbaseline.config import Config
from mlbaseline.measure.step import TRAIN_STAGES
from mlbaseline.measure.timers import StepTimes
from mlbaseline.results import Check, Metric, Result


def memory_values(times: list[StepTimes]) -> dict[str, tuple[dict[str, Any], list[float]]]:
    """name ('mem.peak', 'mem.reserved', 'mem.<stage>') -> (meta, one value per step); empty
    unless every step carries memory."""
    if not times or any(t.memory is None for t in times):
        return {}
    mems = [t.memory for t in times if t.memory is not None]
    out: dict[str, tuple[dict[str, Any], list[float]]] = {
        "mem.peak": ({"memory": "peak"}, [float(m.peak or 0) for m in mems])
    }
    if mems[0].reserved is not None:
        out["mem.reserved"] = ({"memory": "reserved"}, [float(m.reserved or 0) for m in mems])
    seen = {s for m in mems for s in m.held}
    for s in [*TRAIN_STAGES, *sorted(seen - set(TRAIN_STAGES))]:
        if s in seen:
            meta = {"memory": "held", "stage": s}
            out[f"mem.{s}"] = (meta, [float(m.held.get(s, 0)) for m in mems])
    return out


def add_memory_metrics(result: Result, arm: str, times: list[StepTimes], ids: list[int]) -> None:
    """The arm's memory metrics (pair ids as replicate ids), none where its steps have none."""
    for n, (meta, values) in memory_values(times).items():
        meta_m = {"group": f"ab.{arm}", "arm": arm, "role": "memory", **meta}
        result.add_metric(Metric(f"ab.{arm}.{n}", "B", False, values, [], ids, meta=meta_m))


def _row(name: str, meta: dict[str, Any], j: stats.decision.MemoryJudgement) -> dict[str, Any]:
    return {
        "metric": name,
        "stage": meta.get("stage"),
        "memory": meta["memory"],
        "median_old": j.median_old,
        "median_new": j.median_new,
        "delta": j.median_new - j.median_old,
        "change": j.ratio - 1.0,
        "ci_low": j.ci_low,
        "ci_high": j.ci_high,
        "spread": j.spread,
        "scaled": j.scaled,
        "verdict": j.verdict,
        "named": False,
    }


def judge_memory(
    a_times: list[StepTimes], b_times: list[StepTimes], cfg: Config
) -> dict[str, Any] | None:
    """B against A by the memory rule, per memory metric both arms have; the stage named: the
    largest regressed held-bytes change. None without memory on both arms."""
    a, b = memory_values(a_times), memory_values(b_times)
    names = [n for n in a if n in b]
    if not names:
        return None
    thr, alpha = cfg.compare.memory_threshold, cfg.compare.alpha
    # a stage that frees memory (held <= 0) is measured against A's peak
    peak = float(np.median(a["mem.peak"][1])) if "mem.peak" in a else None
    rows = [
        _row(n, a[n][0], stats.decision.memory_rule(a[n][1], b[n][1], False, thr, alpha, peak))
        for n in names
    ]
    stages = [r for r in rows if r["stage"]]
    moved = [r for r in stages if r["verdict"] == "regressed" and r["delta"] > 0]
    if moved:
        max(moved, key=lambda r: r["delta"])["named"] = True
    top = next((r for r in rows if r["metric"] == "mem.peak"), None)
    doc = {
        "group": "B vs A",
        "peak": top and top["metric"],
        "peak_verdict": top and top["verdict"],
        "peak_change": top and top["change"],
        "peak_ci": [top["ci_low"] - 1, top["ci_high"] - 1] if top else None,
        "stages": stages,
        "named": next((r["stage"] for r in stages if r["named"]), None),
    }
    return {
        "threshold": thr,
        "rule": MEMORY_RULE,
        "metrics": rows,
        "named": doc["named"],
        "verdict": overall_memory([r["verdict"] for r in rows]),
        "sentence": memory_sentence(doc),
    }


def overall_memory(verdicts: list[str]) -> str:
    """As stats.overall_verdict: regressed, else improved, else unchanged when all are."""
    for v in ("regressed", "improved"):
        if v in verdicts:
            return v
    return "unchanged" if verdicts and set(verdicts) == {"unchanged"} else "inconclusive"


def memory_checks(result: Result, memory: dict[str, Any], overall: str) -> str:
    """One check per memory metric (regressed fails, as a stage does; inconclusive warns);
    returns the overall verdict with memory's in it."""
    for r in memory["metrics"]:
        status = {"regressed": "fail", "inconclusive": "warn"}.get(r["verdict"], "pass")
        ratio = r["change"] + 1.0
        msg = f"B/A {ratio:.4f} [{r['ci_low']:.4f}, {r['ci_high']:.4f}] (memory rule)"
        result.verdict.checks.append(
            Check(f"ab.{r['metric']}", status, ratio, memory["threshold"], msg)
        )
    return overall_memory([overall, memory["verdict"]])


__all__ = ["add_memory_metrics", "judge_memory", "memory_checks", "memory_values"]
