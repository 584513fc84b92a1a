"""Bench section `replicates` (issue 24, item 1): what a forked replicate saves, and whether it
is still an independent process.

The demo profile's training workload (`--profile demo --mode train --batch-sizes 16`), one
replicate = `python -m mlbaseline throughput -c CFG --json --quiet`, the command
`run_replicates` runs, started two ways and interleaved pair by pair (fresh, fork; fork, fresh;
…) in one sitting, ROUNDS rounds of PAIRS pairs:

- fresh: a new interpreter (`runners.children.run_child`);
- fork: forked from a zygote (`runners.forkserver.ForkServer`), one zygote per round as one per
  `run_replicates`; its start-up (the imports) is waited for before the round and counted in
  the fork arm's time, so nothing overlaps a measurement.

(a) Replicates per minute: 60 × replicates / (their walls, plus the zygotes' start-ups for fork).
(b) A/A: the between-process spread of the step (`stats.noise.components`: process_sd, the sd
of the log per-process medians, and between_sd) of the N forked vs the N fresh replicates, and
an F-test of the two variances (scipy.stats.f, df N−1 each). Forked children share the zygote's
address-space layout and str hash seed, which fresh interpreters draw anew: if that made them
agree more, a comparison of forked replicates would be anti-conservative. Target: the variance
ratio fork/fresh not significantly below 1 (one-sided p ≥ 0.05).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_common import BENCH, Row, pct, secs

ROUNDS = int(os.environ.get("MLB_BENCH_REPLICATES_ROUNDS", "10"))
PAIRS = int(os.environ.get("MLB_BENCH_REPLICATES_PAIRS", "4"))
METRIC = "train.bs16.step"
ALPHA = 0.05


def _command(directory: Path) -> list[str]:
    from mlbaseline.config import resolve
    from mlbaseline.runners.children import child_command, write_child_config

    cfg = resolve(None, "demo", {"throughput.mode": "train", "throughput.batch_sizes": [16]})
    return child_command(write_child_config(cfg, directory))


def _one(launch: Any, command: list[str]) -> dict[str, Any]:
    start = time.perf_counter()
    run = launch(command)
    wall = time.perf_counter() - start
    metric = run.result.measurements.get(METRIC) if run.result is not None else None
    values = list(metric.values) if metric is not None else []
    return {"wall_s": wall, "values": values, "error": None if values else run.error}


def study(rounds: int = ROUNDS, pairs: int = PAIRS) -> dict[str, Any]:
    """Both arms, interleaved; per arm its replicates (wall, step values) and, for fork, the
    zygotes' start-up walls; the load averages before and after."""
    from mlbaseline.runners.children import run_child
    from mlbaseline.runners.forkserver import ForkServer

    out: dict[str, Any] = {"fresh": [], "fork": [], "zygote_s": [], "load": [os.getloadavg()]}
    with tempfile.TemporaryDirectory(prefix="mlb-bench-replicates-") as tmp:
        command = _command(Path(tmp))
        for r in range(rounds):
            start = time.perf_counter()
            with ForkServer() as server:
                server.ready()
                out["zygote_s"].append(time.perf_counter() - start)
                for p in range(pairs):
                    order = ("fresh", "fork") if (r * pairs + p) % 2 == 0 else ("fork", "fresh")
                    for arm in order:
                        launch = run_child if arm == "fresh" else server.run
                        out[arm].append(_one(launch, command))
            (BENCH / "out").mkdir(exist_ok=True)  # a long study keeps what it has
            (BENCH / "out" / "replicates.json").write_text(json.dumps(out), encoding="utf-8")
    out["load"].append(os.getloadavg())
    return out


def per_minute(runs: list[dict[str, Any]], extra_s: float = 0.0) -> float:
    return 60.0 * len(runs) / (sum(r["wall_s"] for r in runs) + extra_s)


def spread_of(runs: list[dict[str, Any]]) -> Any:
    """stats.noise.components of the step over the replicates that gave values."""
    from mlbaseline.stats.noise import components

    values, ids = [], []
    for i, run in enumerate(r for r in runs if r["values"]):
        values += run["values"]
        ids += [i] * len(run["values"])
    return components(values, ids)


def f_test(sd_fork: float, n_fork: int, sd_fresh: float, n_fresh: int) -> dict[str, float]:
    """F = s²_fork / s²_fresh; p of a ratio this low or lower if the variances were equal
    (one-sided: forked processes quieter), two-sided p, and the 90% CI of the ratio."""
    from scipy import stats as st

    ratio = sd_fork**2 / sd_fresh**2
    d1, d2 = n_fork - 1, n_fresh - 1
    lower = float(st.f.cdf(ratio, d1, d2))
    return {
        "ratio": ratio,
        "p_lower": lower,
        "p_two": float(min(1.0, 2 * min(lower, 1 - lower))),
        "ci_low": ratio / float(st.f.ppf(0.95, d1, d2)),
        "ci_high": ratio / float(st.f.ppf(0.05, d1, d2)),
    }


def paired(fresh: list[dict[str, Any]], fork: list[dict[str, Any]]) -> dict[str, float]:
    """Over the adjacent pairs (one of each arm, run back to back): the level fork/fresh of the
    step median (paired t on the logs, 95% CI), and the Pitman-Morgan test of equal variances
    for paired samples (r = corr(x + y, y − x) < 0: fork the quieter), which the load drift
    both arms share does not drown as it does the F-test."""
    from scipy import stats as st

    both = [(a, b) for a, b in zip(fresh, fork, strict=True) if a["values"] and b["values"]]
    x = np.log([float(np.median(a["values"])) for a, _ in both])
    y = np.log([float(np.median(b["values"])) for _, b in both])
    d = y - x
    half = float(st.t.ppf(0.975, len(d) - 1) * np.std(d, ddof=1) / np.sqrt(len(d)))
    r, p = st.pearsonr(x + y, d)
    return {
        "pairs": len(both),
        "level": float(np.exp(d.mean())),
        "level_low": float(np.exp(d.mean() - half)),
        "level_high": float(np.exp(d.mean() + half)),
        "pm_r": float(r),
        "pm_p_lower": float(p / 2 if r < 0 else 1 - p / 2),
    }


SEC = "replicates"


def rows_of(data: dict[str, Any]) -> list[Row]:
    fresh, fork = data["fresh"], data["fork"]
    failed = sum(not r["values"] for r in fresh + fork)
    load = Row(
        SEC,
        "load average (1 min) before / after; replicates without a result",
        f"{data['load'][0][0]:.2f} / {data['load'][-1][0]:.2f}; {failed}",
        "info",
        None,
    )
    return [*_cost_rows(data), *_spread_rows(fresh, fork, failed), load]


def _cost_rows(data: dict[str, Any]) -> list[Row]:
    fresh, fork, zygote = data["fresh"], data["fork"], data["zygote_s"]
    rate_fresh, rate_fork = per_minute(fresh), per_minute(fork, sum(zygote))
    return [
        Row(
            SEC,
            f"replicates per minute, demo train bs16, fresh vs fork ({len(fresh)} each, "
            f"interleaved; fork counts its {len(zygote)} zygote start-ups)",
            f"{rate_fresh:.2f} vs {rate_fork:.2f} (×{rate_fork / rate_fresh:.2f})",
            "fork > fresh",
            rate_fork > rate_fresh,
        ),
        Row(
            SEC,
            "wall per replicate, median fresh / fork; zygote start-up (imports), median",
            f"{secs(float(np.median([r['wall_s'] for r in fresh])))} / "
            f"{secs(float(np.median([r['wall_s'] for r in fork])))}; "
            f"{secs(float(np.median(zygote)))}",
            "info",
            None,
        ),
    ]


def _spread_rows(fresh: list[dict[str, Any]], fork: list[dict[str, Any]], failed: int) -> list[Row]:
    a, b = spread_of(fresh), spread_of(fork)
    if a is None or b is None:
        few = f"too few replicates with values ({failed} failed)"
        return [Row(SEC, "A/A", few, "2 a side", False)]
    f = f_test(b.process_sd, b.processes, a.process_sd, a.processes)
    pm = paired(fresh, fork)
    return [
        Row(
            SEC,
            f"A/A, {a.processes} fresh vs {b.processes} forked processes: process_sd (sd of log "
            "per-process medians of the step) / between_sd / within_sd",
            f"fresh {pct(a.process_sd)} / {pct(a.between_sd)} / {pct(a.within_sd)}; fork "
            f"{pct(b.process_sd)} / {pct(b.between_sd)} / {pct(b.within_sd)}",
            "info",
            None,
        ),
        Row(
            SEC,
            "variance ratio fork/fresh of process_sd² [90% CI]; F-test p (fork quieter, "
            "one-sided) / p (two-sided)",
            f"{f['ratio']:.2f} [{f['ci_low']:.2f}, {f['ci_high']:.2f}]; "
            f"{f['p_lower']:.3f} / {f['p_two']:.3f}",
            f"p(one-sided) ≥ {ALPHA}",
            f["p_lower"] >= ALPHA,
        ),
        Row(
            SEC,
            f"paired over {pm['pairs']} adjacent pairs: Pitman-Morgan r and p (fork quieter, "
            "one-sided); step median fork/fresh [95% CI]",
            f"r {pm['pm_r']:+.2f}, p {pm['pm_p_lower']:.3f}; ×{pm['level']:.3f} "
            f"[{pm['level_low']:.3f}, {pm['level_high']:.3f}]",
            "info",
            None,
        ),
    ]


def replicates() -> list[Row]:
    return rows_of(study())


if __name__ == "__main__":
    for row in rows_of(study()):
        print(f"{row.figure}: {row.value} ({row.mark})")
