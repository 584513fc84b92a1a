"""Synthetic results for the history tests and bench (shaped like a throughput result: group
train.bs64 with a total, stages, a residual and a rate), and PostgreSQL for the suite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mlbaseline.results import Metric, Result, write_result

STAGES = {"data_wait": 2e-4, "forward": 3e-3, "backward": 6e-3, "optimizer": 1e-3}


def synthetic(
    seed: int,
    *,
    slower: dict[str, float] | None = None,
    n: int = 30,
    created_at: str | None = None,
    env: dict[str, Any] | None = None,
    cv: float = 0.02,
    kind: str = "throughput",
) -> Result:
    rng = np.random.default_rng(seed)
    slower = slower or {}
    result = Result(kind=kind, config={"golden": {"seed": 42}})
    if created_at:
        result.created_at = created_at
    result.environment = {"blocking": env or {"device": "cpu", "torch": "x"}, "informational": {}}
    prefix = "train.bs64"
    # one level per sitting (between-process noise), then in-process noise around it
    sitting = rng.lognormal(0.0, cv)
    stages = {
        s: t * slower.get(s, 1.0) * sitting * rng.lognormal(0.0, cv / 2, n)
        for s, t in STAGES.items()
    }
    residual = rng.normal(2e-5, 5e-6, n)
    step = sum(stages.values()) + residual
    meta = {"group": prefix}
    result.add_metric(Metric(f"{prefix}.step", "s", False, step, meta={**meta, "role": "total"}))
    for s, v in stages.items():
        result.add_metric(
            Metric(f"{prefix}.{s}", "s", False, v, meta={**meta, "role": "stage", "stage": s})
        )
    result.add_metric(
        Metric(f"{prefix}.residual", "s", False, residual, meta={**meta, "role": "residual"})
    )
    return result


def stamp(i: int) -> str:
    """A created_at i minutes after a fixed origin (sortable like real ones)."""
    return f"2026-01-01T{i // 60:02d}:{i % 60:02d}:00.000000Z"


def write(result: Result, path: Path) -> Path:
    return write_result(result, path, force=True)
