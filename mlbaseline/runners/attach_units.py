"""A paired A/B of a script, from turns to the figures the test judges (`runners.attach_ab`):
a turn's figures from its steps, and a unit's (an A and a B process, several pairs of turns)
from its turns. Pure Python, no torch."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from mlbaseline.measure.interleave import ARMS
from mlbaseline.measure.memory_step import median_memory
from mlbaseline.measure.step import TRAIN_STAGES
from mlbaseline.measure.timers import StepTimes
from mlbaseline.runners.ab import PairLog
from mlbaseline.runners.attach_turns import turn_memory

NOT_STAGES = ("residual", "eval")  # kept apart or derived: never a judged stage of the step


def turn_times(steps: Sequence[Mapping[str, Any]]) -> tuple[StepTimes, int]:
    """One turn's figures: the median step, the median of every stage seen (a step without
    it counts 0), the median residual (a step's own, else step − its stages); and the median
    samples per step; its memory (`turn_memory`), judged by `mlb ab`'s memory rule."""
    names = sorted({n for s in steps for n in s["stages"]} - set(NOT_STAGES))
    stages = {n: statistics.median(s["stages"].get(n, 0.0) for s in steps) for n in names}

    def residual(s: Mapping[str, Any]) -> float:
        own = s["stages"].get("residual")
        if own is not None:
            return float(own)
        return s["step"] - sum(v for n, v in s["stages"].items() if n not in NOT_STAGES)

    stages["residual"] = statistics.median(residual(s) for s in steps)
    samples = int(statistics.median(s.get("samples", 0) for s in steps))
    step = statistics.median(s["step"] for s in steps)
    return StepTimes(total_s=step, stages=stages, memory=turn_memory(steps)), samples


def extra_stages(log_times: Mapping[str, Sequence[StepTimes]]) -> list[str]:
    """The stages beyond the training stages that the arms' turns measured (a script's own)."""
    seen = {n for times in log_times.values() for t in times for n in t.stages}
    return sorted(seen - set(TRAIN_STAGES) - set(NOT_STAGES))


def pooled_times(times: Sequence[StepTimes]) -> StepTimes:
    """One arm's figures from its turns': the median of the turns' step, of each stage
    (a turn without it counts 0) and of each memory figure (where every turn has one)."""
    names = sorted({n for t in times for n in t.stages})
    stages = {n: statistics.median(t.stages.get(n, 0.0) for t in times) for n in names}
    mems = [t.memory for t in times if t.memory is not None and t.memory.peak is not None]
    memory = median_memory(mems) if mems and len(mems) == len(times) else None
    step = statistics.median(t.total_s for t in times)
    return StepTimes(total_s=step, stages=stages, memory=memory)


def paired_figure(a: Sequence[float], b: Sequence[float]) -> tuple[float, float] | None:
    """One figure of a unit, both arms, from its pairs' turns (`a[i]`, `b[i]`: pair i): the
    median over the pairs of each pair's log-ratio B/A, split symmetrically around the
    geometric mean of all the unit's turns, so that B/A of the two is that median. The two
    turns of a pair ran back to back, so their ratio cancels what the machine did over
    seconds; the median of those ratios sets aside a pair that a burst of the machine's other
    work hit in one turn only (measured on this machine: 0.25 s turns, 8 pairs a unit, the
    units' spread 3.1-3.6% against 3.1-9.1% for the ratio of the arms' median turns). With one
    or two pairs each arm's figure is the geometric mean of its turns. None where a turn's
    figure is not positive (a stage a turn never ran): no ratio to take."""
    if not a or len(a) != len(b) or min(*a, *b) <= 0:
        return None
    logs_a, logs_b = [math.log(v) for v in a], [math.log(v) for v in b]
    level = statistics.fmean([*logs_a, *logs_b])
    ratio = statistics.median(lb - la for la, lb in zip(logs_a, logs_b, strict=True))
    return math.exp(level - ratio / 2), math.exp(level + ratio / 2)


def unit_times(a: Sequence[StepTimes], b: Sequence[StepTimes]) -> tuple[StepTimes, StepTimes]:
    """One unit's figures for arms A and B from its pairs' turns (`a[i]` with `b[i]`): each
    figure by `paired_figure`, or each arm's median turn (`pooled_times`) where it gives none
    (a residual can be 0 or less); memory by each arm's median (its own rule judges it)."""
    pa, pb = pooled_times(a), pooled_times(b)
    sa, sb = dict(pa.stages), dict(pb.stages)
    for name in sa.keys() | sb.keys():
        got = paired_figure(
            [t.stages.get(name, 0.0) for t in a], [t.stages.get(name, 0.0) for t in b]
        )
        if got is not None:
            sa[name], sb[name] = got
    totals = paired_figure([t.total_s for t in a], [t.total_s for t in b])
    ta, tb = totals or (pa.total_s, pb.total_s)
    return replace(pa, total_s=ta, stages=sa), replace(pb, total_s=tb, stages=sb)


def unit_log(
    log: PairLog, figures: Sequence[tuple[str, int, int, StepTimes]]
) -> tuple[PairLog, list[list[int]]]:
    """The pair log the statistics judge: one entry per unit (its pooled turns, over the
    pairs both of whose turns were measured), in the order the units ran; and each unit's
    pairs. The warm-up, stop reason and dropped pairs are the turn log's."""
    by_pair: dict[int, dict[str, tuple[int, StepTimes]]] = {}
    for arm, pair, unit, times in figures:
        by_pair.setdefault(pair, {})[arm] = (unit, times)
    units: dict[int, list[int]] = {}
    for pair, got in sorted(by_pair.items()):
        if len(got) == len(ARMS):
            units.setdefault(got["a"][0], []).append(pair)
    out = PairLog(stop_reason=log.stop_reason, dropped=list(log.dropped))
    for pairs in units.values():
        a, b = unit_times(*([by_pair[p][arm][1] for p in pairs] for arm in ARMS))
        out.times["a"].append(a)
        out.times["b"].append(b)
        out.done.append(f"{len(pairs)} pairs")
    return out, list(units.values())


__all__ = [
    "NOT_STAGES",
    "extra_stages",
    "paired_figure",
    "pooled_times",
    "turn_times",
    "unit_log",
    "unit_times",
]
