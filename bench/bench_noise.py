"""Bench section `noise` (issue 15): what the demo profile's noise is made of, and how small a
change each stage can show.

1. Variance components per stage: `mlb throughput --profile demo --mode train --batch-sizes 16
   --repeats N` (fresh processes), its `data.noise` (one-way random effects on log times:
   within- vs between-process SD, the between share) and the MDE of comparing two such results
   (stats.noise, the figure `mlb compare` uses).
2. An A/A control through the paired runner (`mlb ab`, demo both arms, TRIALS trials of PAIRS
   pairs): the distribution of its per-stage deltas |B/A − 1| (median, p90), to set beside the
   anchors' published floors (php-judy's drift-adjusted deltas: median 0.69%, p90 3.04%).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from bench_common import Row, pct, secs

REPEATS = int(os.environ.get("MLB_BENCH_NOISE_REPEATS", "5"))
TRIALS = int(os.environ.get("MLB_BENCH_NOISE_TRIALS", "8"))
PAIRS = int(os.environ.get("MLB_BENCH_NOISE_PAIRS", "40"))
STAGES = ("data_wait", "h2d", "forward", "loss", "backward", "optimizer", "step")


def _demo(**over: Any) -> Any:
    from mlbaseline.config import resolve

    base = {"throughput.mode": "train", "throughput.batch_sizes": [16]}
    return resolve(profile="demo", overrides={**base, **over})


def components_rows() -> list[Row]:
    import time

    from mlbaseline.runners.throughput import run_throughput

    t0 = time.perf_counter()
    result = run_throughput(_demo(**{"throughput.repeats": REPEATS}))
    wall = time.perf_counter() - t0
    noise = result.data.get("noise", {})
    rows = []
    for stage in STAGES:
        rec = noise.get(f"train.bs16.{stage}")
        if not rec:
            continue
        rows.append(
            Row(
                "noise",
                f"demo {stage} (bs16), {rec['processes']} fresh processes: within-process SD / "
                "between-process SD (log scale ≈ relative); between share; MDE of comparing "
                "two such results",
                f"{pct(rec['within_sd'])} / {pct(rec['between_sd'])}; "
                f"{pct(rec['between_share'])}; {pct(rec['mde'])}",
                "shown",
                None,
            )
        )
    figure = f"wall time of the {REPEATS}-replicate run"
    rows.append(Row("noise", figure, secs(wall), "shown", None))
    return rows


def aa_rows() -> list[Row]:
    from mlbaseline.runners.ab import run_ab

    deltas: dict[str, list[float]] = {s: [] for s in STAGES}
    alarms = 0
    for t in range(TRIALS):
        r = run_ab(_demo(), _demo(), pairs=PAIRS, seed=3000 + t)
        for s in r.data["stages"]:
            if s["stage"] in deltas and s["ratio"] is not None:
                deltas[s["stage"]].append(abs(s["ratio"] - 1))
        alarms += any(s["verdict"] in ("regressed", "improved") for s in r.data["stages"])
    rows = []
    for stage, d in deltas.items():
        if d:
            rows.append(
                Row(
                    "noise",
                    f"A/A paired (mlb ab, demo, {PAIRS} pairs × {TRIALS} trials): |B/A − 1| of "
                    f"{stage}, median / p90 over trials",
                    f"{pct(float(np.median(d)))} / {pct(float(np.percentile(d, 90)))}",
                    "shown (php-judy: 0.69% / 3.04%)",
                    None,
                )
            )
    rows.append(
        Row(
            "noise",
            f"A/A paired trials with any stage regressed or improved, of {TRIALS}",
            f"{alarms}/{TRIALS}",
            "≤ 5%",
            alarms / TRIALS <= 0.05,
        )
    )
    return rows


def noise() -> list[Row]:
    return components_rows() + aa_rows()
