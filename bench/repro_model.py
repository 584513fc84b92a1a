"""Bench `repro`'s evidence rows (issue 15: "if ≤ 3% cannot be reached on this machine, show the
best figure and the evidence why"):

1. **Cost model** (Kalibera & Jones, *Rigorous Benchmarking in Reasonable Time*, 2013), from the
   mlb invocations' own results: a replicate costs c_p seconds of its own (interpreter, torch and
   torchvision imports, model build, warm-up) plus c_s per measured step; a process's figure has
   variance v(n) = b² + (π/2)·w²/n at n steps (b, w: the between- and within-process log sds of
   `data.noise`; π/2: a median of n values). Within a budget B a sitting runs p = B / (c_p + n·c_s)
   processes, so its figure's variance is at best v(n)/p, least at
   n* = sqrt((π/2)·w²·c_p / (b²·c_s)). Add the measured between-sitting variance s²_sit
   (history.sittings) and the five invocations' max/min − 1 is ≤ 3% with the probability computed
   here (seeded Monte Carlo of the range of 5 normal draws). v(n)/p is a mean's variance, a floor
   for a median's: the model's figures are optimistic, so a target it misses is missed.
2. **Ledger** (`bench/repro_ledger.json`): every full `repro` run's figures per tool, kept across
   days, so that "no worse than pyperf" is judged on the pooled within-run variance of all runs
   with the same mlb defaults (an F-test from scipy.stats) rather than on one run's five draws.
   Each entry names its machine, and runs are pooled per machine class: the promise is "same
   machine class", and two VM classes' noise need not be alike.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_common import BENCH, Row, machine_class, pct, secs
from scipy import stats

LEDGER = BENCH / "repro_ledger.json"
TARGET = 0.03  # max/min − 1 over the five invocations
INVOCATIONS = 5
# the mlb defaults a ledger entry was measured with: only entries with today's label are pooled
DEFAULTS = "repeats auto: >= 5 replicates, 60 s budget (demo profile)"
UNKNOWN = "machine not recorded"


def spread_probability(sd: float, n: int = INVOCATIONS, target: float = TARGET) -> float:
    """P(max/min − 1 ≤ target) for n figures whose logs are normal with this sd (seeded)."""
    if sd <= 0:
        return 1.0
    draws = np.random.default_rng(15).standard_normal((200_000, n)) * sd
    return float(np.mean(np.ptp(draws, axis=1) <= math.log1p(target)))


def _inputs(run: dict[str, Any]) -> dict[str, float] | None:
    """One invocation's cost and noise figures; None when its result lacks them."""
    noise, walls = run.get("noise") or {}, run.get("walls") or []
    if not noise or not walls or not run.get("steps"):
        return None
    return {
        "c_s": float(run["median"]),
        "c_p": float(np.mean(walls)) - float(run["steps"]) * float(run["median"]),
        "n": float(run["steps"]),
        "w": float(noise["within_sd"]),
        "b": float(noise["between_sd"]),
        "budget": float(run.get("budget") or sum(walls)),
    }


def split(x: dict[str, float], n: float) -> tuple[float, float]:
    """(processes in the budget, sd of a sitting's figure) at n steps per process."""
    p = x["budget"] / (x["c_p"] + n * x["c_s"])
    v = x["b"] ** 2 + (math.pi / 2) * x["w"] ** 2 / n
    return p, math.sqrt(v / p)


def best_steps(x: dict[str, float]) -> float:
    """Kalibera & Jones' n*: the steps per process that minimise the figure's variance."""
    if x["b"] <= 0:
        return math.inf  # no process-level noise: one long process is best
    return max(1.0, math.sqrt((math.pi / 2) * x["w"] ** 2 * x["c_p"] / (x["b"] ** 2 * x["c_s"])))


def cost_model_row(runs: list[dict[str, Any]], sitting_sd: float | None) -> Row:
    """The cost model on the medians of the invocations' own figures (module doc, 1)."""
    found = [x for x in (_inputs(r) for r in runs) if x is not None]
    if not found:
        return Row("repro", "mlb: cost model", "no noise components in the results", "shown", None)
    x = {k: float(np.median([f[k] for f in found])) for k in found[0]}
    n_star = min(best_steps(x), 10 * x["n"])
    p_now, sd_now = split(x, x["n"])
    p_best, sd_best = split(x, n_star)
    sit = sitting_sd or 0.0
    total_now, total_best = math.hypot(sd_now, sit), math.hypot(sd_best, sit)
    value = (
        f"per replicate c_p {secs(x['c_p'])} of its own + {x['c_s'] * 1e3:.0f} ms a step; "
        f"within sd {pct(x['w'])}, between sd {pct(x['b'])}; at {x['n']:.0f} steps × "
        f"{p_now:.1f} processes in {x['budget']:.0f} s: sitting sd ≥ {pct(sd_now)}; best split "
        f"n* = {n_star:.1f} steps × {p_best:.1f} processes: ≥ {pct(sd_best)}; with the "
        f"between-sitting sd {pct(sit)}: P(5 invocations within 3%) ≤ "
        f"{pct(spread_probability(total_now))} now, ≤ {pct(spread_probability(total_best))} at "
        f"n*; {_budget_text(x, n_star, sit)}"
    )
    return Row(
        "repro",
        "mlb: why ≤ 3% is out of reach (Kalibera & Jones cost model)",
        value,
        "shown (evidence)",
        None,
    )


def _budget_text(x: dict[str, float], n_star: float, sit: float) -> str:
    """The budget at which the best split makes an expected range ≤ 3% (range ≈ 2.326 sd)."""
    need = math.log1p(TARGET) / 2.326  # the sd whose expected range of 5 is the target
    if sit >= need:
        return f"no budget reaches an expected spread ≤ 3% (the sittings alone: sd {pct(sit)})"
    variance_seconds = split(x, n_star)[1] ** 2 * x["budget"]  # v(n*)·(c_p + n*·c_s)
    return (
        f"an expected spread ≤ 3% needs ≥ {variance_seconds / (need**2 - sit**2):.0f} s a sitting"
    )


# ---------------------------------------------------------------- ledger


def load_ledger(path: Path = LEDGER) -> list[dict[str, Any]]:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else []


def append_run(res: dict[str, list[dict[str, Any]]], path: Path = LEDGER) -> None:
    """Record this run's figures (a full run only: the bench's quick mode has fewer rounds)."""
    entries = load_ledger(path)
    entries.append(
        {
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": machine_class(),
            "mlb_defaults": DEFAULTS,
            "medians_ms": {k: [round(r["median"] * 1e3, 2) for r in v] for k, v in res.items()},
            "wall_s": {
                k: round(float(np.median([r["wall"] for r in v])), 1) for k, v in res.items()
            },
        }
    )
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def pooled_variance(runs: list[list[float]]) -> tuple[float, int]:
    """Pooled within-run variance of the log figures, and its degrees of freedom."""
    ss = sum(float(((np.log(r) - np.log(r).mean()) ** 2).sum()) for r in runs)
    dof = sum(len(r) - 1 for r in runs)
    return ss / dof, dof


def machines(entries: list[dict[str, Any]]) -> list[str]:
    """The machines on record, in the order they first appear."""
    return list(dict.fromkeys(e.get("machine", UNKNOWN) for e in entries))


def pooled_row(entries: list[dict[str, Any]], reference: str, machine: str) -> Row:
    """Is mlb's spread worse than the reference's, over every ledger run on this machine class
    with today's defaults (the promise is per machine class)? Met only when mlb's pooled sd is
    no larger; the one-sided F-test (scipy.stats) says how far the runs on record can tell the
    two apart, beside it, not instead of it."""
    same = [
        e
        for e in entries
        if e.get("mlb_defaults") == DEFAULTS
        and e.get("machine", UNKNOWN) == machine
        and {"mlb", reference} <= set(e["medians_ms"])
    ]
    runs = [e["medians_ms"] for e in same]
    figure = f"mlb vs {reference} on {machine}, pooled over the runs on record (repro_ledger.json)"
    if len(runs) < 2:
        return Row("repro", figure, f"{len(runs)} run(s) on record", "shown", None)
    v_mlb, d_mlb = pooled_variance([r["mlb"] for r in runs])
    v_ref, d_ref = pooled_variance([r[reference] for r in runs])
    f = v_mlb / v_ref
    p = float(stats.f.sf(f, d_mlb, d_ref))  # H1: mlb's variance is the larger
    value = (
        f"{len(runs)} runs ({', '.join(e['when'] for e in same)}): pooled sd of the figures mlb "
        f"{pct(math.sqrt(v_mlb))} vs {reference} {pct(math.sqrt(v_ref))} (dof {d_mlb}/{d_ref}); "
        f"F = {f:.2f}, one-sided p = {p:.2f} that mlb's is larger"
    )
    return Row("repro", figure, value, f"no worse than {reference} (pooled sd ≤)", bool(f <= 1.0))
