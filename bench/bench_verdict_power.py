"""`make bench BENCH=power`: false alarms and power of `mlb compare` on the default path, by
simulation (tests/sim_default_path.py: seeded fake replicates with this machine's noise shape,
compared by the real `compare_results`). The figures docs/VERDICTS.md quotes.

Per between-process sd (4, 6, 8%) and replicates a side (2, 3, 5, 10, 20):
- A/A: the share of pairs that fail the gate (--fail-on regressed);
- 3×: the share where the step is regressed (a model change: forward and backward slower);
- one stage 20% slower (backward, ~55% of the step): the share regressed with backward named;
- the median headline MDE.

    .venv/bin/python bench/bench_verdict_power.py [SEEDS]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import sim_default_path as sim  # noqa: E402  (tests/ is on sys.path only from here on)
from bench_common import Row  # noqa: E402

from mlbaseline import comparison as cmp  # noqa: E402
from mlbaseline.config import CompareConfig  # noqa: E402

SDS = (0.04, 0.06, 0.08)
COUNTS = (2, 3, 5, 10, 20)
STEP = f"{sim.GROUP}.step"
THREE_X = sim.slowed(["forward", "backward"], 3.0)


def _one(rng: np.random.Generator, k: int, noise: sim.Noise, slow: dict | None) -> dict:
    old, new = sim.fixed(rng, k, noise=noise), sim.fixed(rng, k, slow, noise=noise)
    return cmp.compare_results(old, new, CompareConfig()).to_dict()


def cell(sd: float, k: int, seeds: int) -> dict[str, float]:
    """Rates over `seeds` pairs of each scenario at one (sd, k)."""
    noise = sim.Noise(between=sd)
    rng = np.random.default_rng(int(sd * 1000) * 100 + k)
    aa = [_one(rng, k, noise, None) for _ in range(seeds)]
    big = [_one(rng, k, noise, THREE_X) for _ in range(seeds)]
    stage = [_one(rng, k, noise, {"backward": 1.2}) for _ in range(seeds)]

    def step(doc: dict) -> dict:
        return next(m for m in doc["metrics"] if m["metric"] == STEP)

    named = [d["failed"] and d["attribution"][0]["named"] == ["backward"] for d in stage]
    return {
        "aa_false": float(np.mean([d["failed"] for d in aa])),
        "big": float(np.mean([step(d)["verdict"] == "regressed" for d in big])),
        "stage": float(np.mean(named)),
        "mde": float(np.median([step(d)["mde"] for d in aa])),
    }


def table(seeds: int = 40) -> list[str]:
    lines = [
        "| between-process sd | processes a side | A/A false alarms | 3× regressed | "
        "backward +20% caught and named | step MDE (median) |",
        "|---|---|---|---|---|---|",
    ]
    for sd in SDS:
        for k in COUNTS:
            c = cell(sd, k, seeds)
            lines.append(
                f"| {sd:.0%} | {k} | {c['aa_false']:.1%} | {c['big']:.0%} | {c['stage']:.0%} "
                f"| {c['mde']:.1%} |"
            )
    return lines


def power() -> list[Row]:
    """Rows for `make bench`: at the issue's targets (3× caught from 2 a side, A/A <= 5%)."""
    rows = []
    for k in COUNTS:
        c = cell(0.06, k, 40)
        rows.append(Row("power", f"sd 6%, {k} vs {k}: 3× regressed", f"{c['big']:.0%}", "100%",
                        c["big"] == 1.0))  # fmt: skip
        rows.append(Row("power", f"sd 6%, {k} vs {k}: A/A false alarms", f"{c['aa_false']:.1%}",
                        "<= 5%", c["aa_false"] <= 0.05))  # fmt: skip
        rows.append(Row("power", f"sd 6%, {k} vs {k}: backward +20% caught, named",
                        f"{c['stage']:.0%}", "info", None))  # fmt: skip
    return rows


if __name__ == "__main__":
    print("\n".join(table(int(sys.argv[1]) if len(sys.argv) > 1 else 40)))
