"""Bench section `ab` (issue 15): does the paired, interleaved runner catch a 3% slowdown of the
training step that sits in one stage, name that stage and no other, and keep quiet on A/A?

The workload is a small real conv net (`busy_workloads:SpinCnn`, batch 16, one thread), so the
machine's noise is in every stage; B adds a busy-wait in backward of 3% of A's step median
(calibrated in this run). Per trial:
- paired: `run_ab` (in one process, ABBA order) for A/A and for A/B, `PAIRS` pairs each;
- unpaired: two separate single-process `mlb throughput` runs (A, then B, or A then A;
  `run_throughput` in this process, one after the other) compared with `compare_results`,
  as a user who runs twice and compares would. Fresh processes would add the between-process
  noise on top (see `drift`), so this side is the unpaired comparison at its most favourable.
A trial "catches" the slowdown when backward is the only regressed stage (the step may be
regressed too); an A/A trial is a false alarm when any stage or the step is regressed.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Any

import numpy as np
from bench_common import Row, pct, secs
from busy_workloads import spin_cnn_overrides

TRIALS = int(os.environ.get("MLB_BENCH_AB_TRIALS", "20"))
PAIRS = int(os.environ.get("MLB_BENCH_AB_PAIRS", "800"))
SLOWDOWN = 0.03
STAGES = ("data_wait", "h2d", "forward", "loss", "backward", "optimizer")


def _cfg(backward_s: float) -> Any:
    from mlbaseline.config import resolve

    return resolve(overrides=spin_cnn_overrides(backward_s))


def calibrate() -> float:
    """A's step median (s), from a short in-process A/A run."""
    from mlbaseline.runners.ab import run_ab

    r = run_ab(_cfg(0.0), _cfg(0.0), pairs=60, seed=999)
    return float(np.median(r.measurements["ab.a.step"].values))


def _regressed_paired(result: Any) -> set[str]:
    return {s["stage"] for s in result.data["stages"] if s["verdict"] == "regressed"}


def _paired(a: Any, b: Any, seed: int) -> tuple[set[str], float]:
    from mlbaseline.runners.ab import run_ab

    t0 = time.perf_counter()
    r = run_ab(a, b, pairs=PAIRS, seed=seed)
    return _regressed_paired(r), time.perf_counter() - t0


def _unpaired(a: Any, b: Any) -> tuple[set[str], float]:
    from mlbaseline.comparison import compare_results
    from mlbaseline.runners.throughput import run_throughput

    t0 = time.perf_counter()
    old, new = run_throughput(a), run_throughput(b)
    comp = compare_results(old, new, a.compare, allow_mismatch=True)
    bad = {m.name.rsplit(".", 1)[-1] for m in comp.metrics if m.verdict == "regressed"}
    return bad, time.perf_counter() - t0


def trials(step_s: float) -> dict[str, list[tuple[set[str], float]]]:
    a, b = _cfg(0.0), _cfg(SLOWDOWN * step_s)
    out: dict[str, list[tuple[set[str], float]]] = {k: [] for k in ("pAA", "pAB", "uAA", "uAB")}
    for t in range(TRIALS):
        out["pAA"].append(_paired(a, a, 1000 + t))
        out["pAB"].append(_paired(a, b, 2000 + t))
        out["uAA"].append(_unpaired(a, a))
        out["uAB"].append(_unpaired(a, b))
    return out


def _caught(bad: set[str]) -> bool:
    return "backward" in bad and not (bad & (set(STAGES) - {"backward"}))


def rows_from(step_s: float, res: dict[str, list[tuple[set[str], float]]]) -> list[Row]:
    n = len(res["pAB"])
    rows = []
    for mode, label in (("p", f"paired mlb ab, {PAIRS} pairs"), ("u", "unpaired compare")):
        ab, aa = res[f"{mode}AB"], res[f"{mode}AA"]
        caught = sum(_caught(bad) for bad, _ in ab)
        others = sum(bool(bad & (set(STAGES) - {"backward"})) for bad, _ in ab)
        named = Counter(s for bad, _ in ab for s in bad & (set(STAGES) - {"backward"}))
        which = f" ({', '.join(f'{k} {v}' for k, v in named.most_common())})" if named else ""
        alarms = sum(bool(bad) for bad, _ in aa)
        wall = float(np.median([w for _, w in ab + aa]))
        rows.append(
            Row(
                "ab",
                f"{label}: +3% step slowdown in backward ({SLOWDOWN * step_s * 1e3:.2f} ms on a "
                f"{step_s * 1e3:.2f} ms step) caught, backward alone named, of {n} trials",
                f"{caught}/{n} ({pct(caught / n)}); another stage named in {others}{which}",
                "≥ 95%" if mode == "p" else "shown beside",
                caught / n >= 0.95 if mode == "p" else None,
            )
        )
        rows.append(
            Row(
                "ab",
                f"{label}: A/A false alarms (any stage or the step regressed), of {n} trials; "
                "wall time per trial (median)",
                f"{alarms}/{n} ({pct(alarms / n)}); {secs(wall)}",
                "≤ 5%" if mode == "p" else "shown beside",
                alarms / n <= 0.05 if mode == "p" else None,
            )
        )
    return rows


def ab() -> list[Row]:
    step_s = calibrate()
    return rows_from(step_s, trials(step_s))
