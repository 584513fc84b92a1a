"""A simulation of the default pipeline (issue 24): seeded fake replicates with this machine's
measured noise shape, taken the way `repeats: auto` takes them, compared the way `mlb compare`
compares them. Used by tests/test_verdicts_default_path.py and bench's `verdicts` power table.

The noise shape (bench `drift` and `noise`, bench/RESULTS.md):
- within a process, each stage's step-to-step spread is lognormal with CV ~10%;
- between fresh processes, a level shared by every stage of that process (a slow process is
  slow throughout: the same CPU, the same neighbours), lognormal with sd 4–8%;
- between sittings (one result and the next, minutes apart), a level shared by every process of
  that result, sd ~1.5%.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from mlbaseline.results import Metric, Result
from mlbaseline.runners import replicate_plan as rp

GROUP = "train.bs16"
BATCH = 16
# shares of a training step (resnet18-like on a CPU: backward the largest); the rest residual
SHARES = {
    "data_wait": 0.08,
    "h2d": 0.01,
    "forward": 0.28,
    "loss": 0.02,
    "backward": 0.55,
    "optimizer": 0.05,
}
RESIDUAL = 1.0 - sum(SHARES.values())
STEP_S = 0.010
# one fresh replicate's wall time (start-up, warm-up and measurement) of the demo training
# workload on this 2-core VM: bench/RESULTS.md `replicates`, median of 64 fresh processes
WALL_S = 5.8
ENV = {"blocking": {"device": "cpu", "cpu_model": "sim"}, "informational": {}}


@dataclass(frozen=True)
class Noise:
    within: float = 0.10
    between: float = 0.05
    sitting: float = 0.015
    steps: int = 60


def _process(rng: np.random.Generator, level: float, slow: Mapping[str, float], n: Noise):
    """One process's stage times (stage -> array of n.steps) and its step times."""
    stages = {}
    for stage, share in SHARES.items():
        spread = rng.lognormal(0.0, n.within, n.steps)
        stages[stage] = STEP_S * share * slow.get(stage, 1.0) * level * spread
    stages["residual"] = STEP_S * RESIDUAL * level * rng.lognormal(0.0, n.within, n.steps)
    return stages, sum(stages.values())


def _result(processes: list[tuple[dict[str, np.ndarray], np.ndarray]]) -> Result:
    r = Result(kind="throughput", environment={k: dict(v) for k, v in ENV.items()})
    rep = None
    if len(processes) > 1:  # one process: no replicate ids, as a run without replicates
        rep = np.repeat(np.arange(len(processes)), len(processes[0][1])).tolist()
    step = np.concatenate([s for _, s in processes])
    meta = {"group": GROUP, "role": "total", "stages": list(SHARES)}
    r.add_metric(Metric(f"{GROUP}.step", "s", False, step.tolist(), replicate=rep, meta=meta))
    for stage in [*SHARES, "residual"]:
        values = np.concatenate([p[stage] for p, _ in processes]).tolist()
        role = "residual" if stage == "residual" else "stage"
        m = {"group": GROUP, "role": role, **({"stage": stage} if role == "stage" else {})}
        r.add_metric(Metric(f"{GROUP}.{stage}", "s", False, values, replicate=rep, meta=m))
    rate = (BATCH / step).tolist()
    meta = {"group": GROUP, "role": "rate", "per": "process"}
    r.add_metric(Metric(f"{GROUP}.samples_per_s", "items/s", True, rate, replicate=rep, meta=meta))
    return r


def fixed(
    rng: np.random.Generator,
    k: int,
    slow: Mapping[str, float] | None = None,
    noise: Noise = Noise(),
) -> Result:
    """A result of exactly `k` processes (what auto ends on, whatever it was)."""
    sitting = rng.lognormal(0.0, noise.sitting)
    levels = sitting * rng.lognormal(0.0, noise.between, k)
    return _result([_process(rng, lv, slow or {}, noise) for lv in levels])


def auto(
    rng: np.random.Generator,
    slow: Mapping[str, float] | None = None,
    noise: Noise = Noise(),
    budget_s: float = 120.0,
    max_repeats: int = 20,
    wall_s: float | None = None,
) -> Result:
    """A result taken as `repeats: auto` takes it (the real plan: rp.decide, the defaults of
    throughput.replicates_budget_s / max_repeats / repro_target), `wall_s` (WALL_S) a
    replicate."""
    plan = rp.Plan(rp.MIN_AUTO, max_repeats, 0.015, budget_s)
    sitting = rng.lognormal(0.0, noise.sitting)
    processes: list[tuple[dict[str, np.ndarray], np.ndarray]] = []
    while True:
        level = sitting * rng.lognormal(0.0, noise.between)
        processes.append(_process(rng, level, slow or {}, noise))
        medians = {f"{GROUP}.step": [float(np.median(s)) for _, s in processes]}
        walls = [wall_s or WALL_S] * len(processes)
        if rp.decide(medians, walls, plan).stop is not None:
            return _result(processes)


def slowed(stages: list[str], factor: float) -> dict[str, float]:
    """Per-stage factors that slow the *step* by `factor`, spread over `stages` (their shares)."""
    share = sum(SHARES[s] for s in stages)
    f = 1.0 + (factor - 1.0) / share
    return dict.fromkeys(stages, f)
