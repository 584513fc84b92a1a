"""The result file of a comparison: kind "compare", one verdict check per judged metric."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mlbaseline.comparison.model import Comparison
from mlbaseline.formatting import interval_percent as _interval_pct
from mlbaseline.formatting import p_value
from mlbaseline.formatting import signed_percent as _pct
from mlbaseline.results import Check, Result
from mlbaseline.stats.decision import INSUFFICIENT


def to_result(comparison: Comparison, config: dict[str, Any]) -> Result:
    """A result of kind "compare": the comparison document in ``data``, one verdict check per
    judged metric (fail/warn/pass by fail_on), plus fail checks for what --fail-on any counts."""
    doc = comparison.to_dict()
    result = Result(kind="compare", config=config, data=doc)
    failing = set(doc["failing"])
    mark = "[not comparable] " if comparison.allow_mismatch and doc["blocking_differences"] else ""
    for m in doc["metrics"]:
        name = m["metric"]
        if name in failing:
            status = "fail"
        elif m["verdict"] in ("regressed", "inconclusive", INSUFFICIENT):
            status = "warn"
        else:
            status = "pass"
        result.verdict.checks.append(
            Check(
                name=f"compare.{name}",
                status=status,
                value=m["change"],
                threshold=m["threshold"],
                message=f"{mark}{verdict_text(m)}",
            )
        )
    for s in doc["skipped"]:
        status = "fail" if s["metric"] in failing else "skip"
        result.verdict.checks.append(Check(f"compare.{s['metric']}", status, message=s["reason"]))
    for name in doc["only_old"]:
        status = "fail" if name in failing else "skip"
        msg = f"only in {doc['old']['label']}"
        result.verdict.checks.append(Check(f"compare.{name}", status, message=msg))
    for w in doc["warnings"]:
        result.warn(
            w["code"], w["message"], **{k: v for k, v in w.items() if k not in ("code", "message")}
        )
    return result


def verdict_text(m: Mapping[str, Any]) -> str:
    """'regressed +6.0% [4.9, 7.1], p=<0.001' / 'inconclusive (MDE 4.2%, ~120 samples/side)'."""
    ci = _interval_pct([_minus1(m["ci_low"]), _minus1(m["ci_high"])])
    text = f"{m['verdict']} {_pct(m['change'])} {ci}, p(adj.)={p_value(m['p_adjusted'])}"
    if m.get("test") == "memory":  # no test: the CI against the memory band (comparison.memory)
        text = f"{m['verdict']} {_pct(m['change'])} {ci} (memory rule)"
    if m.get("reason"):  # no verdict of its own: one process a side, or its step did not move
        return f"{text} ({m['reason']})"
    if m["verdict"] == "inconclusive" and m.get("samples_needed"):
        unit = "replicates" if m.get("basis") == "replicates" else "samples"
        mde = m.get("mde")
        mde_text = f"MDE {100 * mde:.1f}%, " if mde is not None and math.isfinite(mde) else ""
        text += f" ({mde_text}~{m['samples_needed']} {unit}/side would settle it)"
    return text


def _minus1(x: float | None) -> float | None:
    return None if x is None else x - 1.0
