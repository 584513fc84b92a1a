"""How many fresh-process replicates a throughput baseline takes by default (issue 15, item 4).

A single process cannot show between-process noise, and on a shared machine that noise is the
larger part (bench `drift`). So `throughput.repeats: auto` (the default) runs replicates one
after another and stops at the first of:
- **target**: the Student-t half-width of the median across replicates (the same formula the
  report's reproducibility signal judges, `stats.relative_t_half_width`) is within
  `throughput.repro_target` for every total metric (training step, inference batch), after at
  least `MIN_AUTO` replicates;
- **budget**: one more replicate (at the mean wall time of those so far) would pass
  `throughput.replicates_budget_s` — never below :data:`DECIDE_MIN`, the fewest processes with
  which `mlb compare` can reach a verdict (`stats.decision.min_decidable`, from the degrees of
  freedom of the very test it runs): a budget too small for them is passed, and the result says
  so with the budget that would fit them, instead of holding a figure no comparison can judge;
- **max**: `throughput.max_repeats` replicates.
The decision and its figures go in the result (`data.replicate_plan`), with the replicate count a
user would need for the target when the budget stopped it first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlbaseline import stats
from mlbaseline.stats import decision

# With 3 replicates the spread has 2 degrees of freedom: in bench `repro`, trios that looked
# quiet (±1.5%) came from invocations whose medians spread 5% apart. Five are the floor of the
# target stop.
MIN_AUTO = 5
# The floor of every stop: below it a comparison of two such results is "insufficient data".
DECIDE_MIN = decision.min_decidable()


@dataclass(frozen=True)
class Plan:
    min_k: int
    max_k: int
    target: float
    budget_s: float
    confidence: float = 0.95


@dataclass(frozen=True)
class Decision:
    stop: str | None  # None: run another; else "target" | "budget" | "max"
    half_width: float | None  # worst relative half-width over the judged metrics
    worst: str | None  # the metric it belongs to
    needed: int | None  # replicates the target needs at the measured spread

    def to_dict(self) -> dict[str, Any]:
        return {
            "stop": self.stop,
            "half_width": self.half_width,
            "worst_metric": self.worst,
            "needed": self.needed,
        }


def plan_for(t: Any, under_torchrun: bool = False) -> tuple[int, Plan | None, str | None]:
    """From a ThroughputConfig: (replicates to run at most, the auto plan or None for a fixed
    count, why auto fell back to one process or None). Auto runs one process where replicates
    cannot run: under torchrun (every rank is a process of one run) and with nproc > 1 (each
    replicate would launch its own process group; ask for a number to do that)."""
    if t.repeats != "auto":
        return int(t.repeats), None, None
    if under_torchrun:
        return 1, None, "under torchrun every rank is one process of a single run"
    if t.nproc > 1:
        return 1, None, f"nproc {t.nproc}: set --repeats N for replicated process groups"
    plan = Plan(MIN_AUTO, max(t.max_repeats, 1), t.repro_target, t.replicates_budget_s)
    return plan.max_k, plan, None


def total_medians(children: Sequence[Any]) -> dict[str, list[float]]:
    """Per total metric (role `total`: a training step, an inference batch), the median of
    each finished replicate."""
    out: dict[str, list[float]] = {}
    for child in children:
        for name, m in child.measurements.items():
            if m.meta.get("role") == "total" and m.values:
                out.setdefault(name, []).append(float(np.median(m.values)))
    return out


def worst_half_width(
    medians: Mapping[str, Sequence[float]], confidence: float
) -> tuple[float | None, str | None, float]:
    """The largest relative t half-width over metrics with ≥ 2 replicate medians, its metric,
    and that metric's CV across replicates."""
    worst: tuple[float | None, str | None, float] = (None, None, 0.0)
    for name, values in medians.items():
        if len(values) < 2:
            continue
        cv = stats.summarize(values).cv  # the report's cv signal judges the same figure
        hw = stats.relative_t_half_width(cv, len(values), confidence)
        if worst[0] is None or hw > worst[0]:
            worst = (hw, name, cv)
    return worst


def decide(
    medians: Mapping[str, Sequence[float]], walls_s: Sequence[float], plan: Plan
) -> Decision:
    """After `len(walls_s)` replicates: stop, or run one more? `medians`: per judged metric,
    the median of each finished replicate."""
    k = len(walls_s)
    hw, worst, cv = worst_half_width(medians, plan.confidence)
    needed = (
        stats.replicates_for_half_width(cv, plan.target, plan.confidence)
        if hw is not None
        else None
    )
    if k >= plan.min_k and hw is not None and hw <= plan.target:
        return Decision("target", hw, worst, needed)
    if k >= plan.max_k:
        return Decision("max", hw, worst, needed)
    mean_wall = float(np.mean(walls_s)) if k else 0.0
    if k >= DECIDE_MIN and sum(walls_s) + mean_wall > plan.budget_s:
        return Decision("budget", hw, worst, needed)
    return Decision(None, hw, worst, needed)


def over_budget(k: int, walls_s: Sequence[float], plan: Plan) -> str | None:
    """The line that says the budget could not hold the DECIDE_MIN replicates a comparison
    needs (they ran anyway), with the budget that would; None when it held them."""
    if not walls_s or sum(walls_s) <= plan.budget_s or k > DECIDE_MIN:
        return None
    return (
        f"{k} replicates took {sum(walls_s):.0f} s, past the {plan.budget_s:.0f} s budget: "
        f"{DECIDE_MIN} are the fewest a comparison can judge (fewer: insufficient data); "
        f"throughput.replicates_budget_s {budget_for(DECIDE_MIN, walls_s)} fits them"
    )


def budget_for(k: int, walls_s: Sequence[float]) -> int:
    """A budget (s) in which `k` replicates at the mean wall so far (non-empty) pass the budget
    rule of `decide`, with a tenth to spare for a slower replicate."""
    return math.ceil(1.1 * k * float(np.mean(walls_s)))


def message(decision: Decision, k: int, plan: Plan, walls_s: Sequence[float] = ()) -> str:
    """One line for the result and the terminal."""
    hw = "n/a" if decision.half_width is None else f"±{decision.half_width * 100:.1f}%"
    if decision.stop == "target":
        return (
            f"{k} replicates: median known to {hw} across this sitting's processes "
            f"(target ±{plan.target * 100:.1f}%; another sitting may differ more: bench repro)"
        )
    need = f"; the target needs ~{decision.needed}" if decision.needed else ""
    if decision.stop == "budget" and k < plan.min_k and walls_s:
        # the spread of fewer than min_k replicates has too few degrees of freedom for the
        # count to be more than a rough figure: say so, and what budget fits min_k
        need += (
            f" (a rough figure from {k}: about {budget_for(plan.min_k, walls_s)} s of "
            f"throughput.replicates_budget_s fits the {plan.min_k} that auto starts from)"
        )
    why = {"budget": f"time budget {plan.budget_s:.0f} s", "max": f"max_repeats {plan.max_k}"}
    reason = why.get(decision.stop or "", decision.stop or "")
    return (
        f"{k} replicates ({reason}): median known to {hw}, "
        f"above the ±{plan.target * 100:.1f}% target{need}"
    )


__all__ = [
    "DECIDE_MIN",
    "MIN_AUTO",
    "Decision",
    "Plan",
    "budget_for",
    "decide",
    "message",
    "over_budget",
    "plan_for",
    "total_medians",
    "worst_half_width",
]
