"""Compare change-point libraries on the synthetic series of issue 16 (a one-off script).

The three candidates cannot share one environment (signal-processing-algorithms pins numpy<2,
apache-otava pins numpy==2.2.0 and scipy<1.17, the project has numpy 2.4 / scipy 1.17), so each
runs in its own throwaway venv:

    python3.11 -m venv /tmp/cp_spa && /tmp/cp_spa/bin/pip install signal-processing-algorithms
    python3.11 -m venv /tmp/cp_otava && /tmp/cp_otava/bin/pip install apache-otava
    python3.11 -m venv /tmp/cp_rup && /tmp/cp_rup/bin/pip install ruptures
    .venv/bin/python bench/changepoint_libs.py --table \\
        spa=/tmp/cp_spa/bin/python otava=/tmp/cp_otava/bin/python \\
        ruptures=/tmp/cp_rup/bin/python mlb=.venv/bin/python

`--lib NAME` runs one candidate in the current interpreter and prints one JSON row; `--table`
runs each NAME=PYTHON in a child process and prints the Markdown table. `--quick` uses 20 seeds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

BASE, CV, STEP, SPIKE, TAIL_STEP = 100.0, 0.015, 1.05, 1.30, 1.10
N, AT = 60, 30  # 60 points; the step (and the spike) at position 30


def series(case: str, seed: int) -> np.ndarray:
    """The synthetic cases: a 5% step after 30 points, flat, a one-run spike, a step in the tail."""
    rng = np.random.default_rng(seed)
    level = np.full(N, BASE)
    if case == "step":
        level[AT:] *= STEP
    elif case == "spike":
        level[AT] *= SPIKE
    elif case == "tail1":
        level[-1:] *= TAIL_STEP
    elif case == "tail2":
        level[-2:] *= TAIL_STEP
    return level * (1.0 + CV * rng.standard_normal(N))


def _sigma(x: np.ndarray) -> float:
    # robust noise scale from first differences: a step or a spike barely moves it
    d = np.diff(x)
    return float(np.median(np.abs(d - np.median(d))) * 1.4826 / np.sqrt(2.0)) or 1e-12


def cp_spa(x: np.ndarray, seed: int) -> list[int]:
    from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive

    np.random.seed(seed)  # e_divisive's permutation test draws from the global RNG
    return sorted(int(i) for i in e_divisive(x, pvalue=0.05, permutations=100))


def cp_otava(x: np.ndarray, seed: int) -> list[int]:
    from otava.analysis import compute_change_points

    cps, _weak = compute_change_points(list(map(float, x)))  # defaults: window 50, p 0.001
    return sorted(int(c.index) for c in cps)


def cp_ruptures(x: np.ndarray, seed: int) -> list[int]:
    import ruptures as rpt

    z = x / np.median(x)
    pen = 3.0 * _sigma(z) ** 2 * np.log(len(z))  # BIC-like penalty on the l2 cost
    bkps = rpt.KernelCPD(kernel="linear", min_size=1).fit(z).predict(pen=pen)
    return [int(b) for b in bkps[:-1]]


def cp_mlb(x: np.ndarray, seed: int) -> list[int]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from mlbaseline.history.changepoints import detect

    det = detect(x, seed=seed)
    # a suspected change is reported as such, never as a confirmed one: the tail rows count it
    return [c.index if c.status == "confirmed" else -c.index for c in det.change_points]


def cp_mlb_outliers(x: np.ndarray, seed: int) -> list[int]:
    from mlbaseline.history.changepoints import detect

    return [o.index for o in detect(x, seed=seed).outliers]


LIBS: dict[str, Callable[[np.ndarray, int], list[int]]] = {
    "spa": cp_spa,
    "otava": cp_otava,
    "ruptures": cp_ruptures,
    "mlb": cp_mlb,
}


def _share(hits: list[bool]) -> float:
    return round(100.0 * sum(hits) / len(hits), 1)


def evaluate(name: str, seeds: int) -> dict[str, object]:
    find = LIBS[name]
    conf = lambda cps: [c for c in cps if c > 0]  # noqa: E731 (only mlb marks suspected < 0)
    row: dict[str, object] = {"lib": name, "seeds": seeds}
    step = [find(series("step", s), s) for s in range(seeds)]
    row["step_found"] = _share([any(abs(c - AT) <= 2 for c in conf(cps)) for cps in step])
    flat = [find(series("flat", s), s) for s in range(seeds)]
    row["flat_clean"] = _share([not cps for cps in flat])
    spike = [find(series("spike", s), s) for s in range(seeds)]
    row["spike_not_cp"] = _share([all(abs(abs(c) - AT) > 1 for c in cps) for cps in spike])
    if name == "mlb":
        outl = [cp_mlb_outliers(series("spike", s), s) for s in range(seeds)]
        row["spike_outlier"] = _share([AT in o for o in outl])
    for case, k in (("tail1", 1), ("tail2", 2)):
        got = [find(series(case, s), s) for s in range(seeds)]
        row[f"{case}_confirmed"] = _share([any(c >= N - k - 1 for c in conf(g)) for g in got])
        row[f"{case}_suspected"] = _share([any(-c >= N - k - 1 for c in g) for g in got])
    row.update(_timing(find))
    return row


def _timing(find: Callable[[np.ndarray, int], list[int]]) -> dict[str, object]:
    """Wall time of 100 series × 100 points (10,000 results) and of one 10,000-point series."""
    rng = np.random.default_rng(7)
    shape = np.r_[np.ones(50), np.full(50, STEP)]
    many = [BASE * shape * (1 + CV * rng.standard_normal(100)) for _ in range(100)]
    t0 = time.perf_counter()
    for i, x in enumerate(many):
        find(x, i)
    out: dict[str, object] = {"t_100x100_s": round(time.perf_counter() - t0, 3)}
    levels = np.repeat(BASE * STEP ** (np.arange(20) % 2), 500)
    long = levels * (1 + CV * rng.standard_normal(levels.size))
    budget = 120.0
    t0 = time.perf_counter()
    try:
        res = _with_timeout(find, long, budget)
        out["t_1x10000_s"] = round(time.perf_counter() - t0, 3)
        out["n_cps_10000"] = len(res)  # 19 true change points
    except TimeoutError:
        out["t_1x10000_s"] = f"> {budget:.0f}"
    return out


def _with_timeout(find, x, budget):
    import signal

    def _raise(*_):
        raise TimeoutError

    signal.signal(signal.SIGALRM, _raise)
    signal.alarm(int(budget))
    try:
        return find(x, 0)
    finally:
        signal.alarm(0)


COLUMNS = (
    ("lib", "library (adapter)"),
    ("step_found", "(a) 5% step at 30 found ±2, %"),
    ("flat_clean", "(b) flat 60: no change point, %"),
    ("spike_not_cp", "(c) spike not a change point, %"),
    ("spike_outlier", "(c) spike reported as outlier, %"),
    ("tail1_confirmed", "(d) last-1 step confirmed (wrong), %"),
    ("tail1_suspected", "(d) last-1 step suspected, %"),
    ("tail2_confirmed", "(d) last-2 step confirmed (wrong), %"),
    ("tail2_suspected", "(d) last-2 step suspected, %"),
    ("t_100x100_s", "100 × 100 points, s"),
    ("t_1x10000_s", "1 × 10,000 points, s"),
)


def table(rows: list[dict[str, object]]) -> str:
    head = "| " + " | ".join(t for _, t in COLUMNS) + " |"
    sep = "|" + "---|" * len(COLUMNS)
    body = ["| " + " | ".join(str(r.get(k, "n/a")) for k, _ in COLUMNS) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lib", choices=sorted(LIBS))
    ap.add_argument("--table", nargs="*", metavar="NAME=PYTHON")
    ap.add_argument("--quick", action="store_true", help="20 seeds instead of 100")
    args = ap.parse_args()
    seeds = 20 if args.quick else 100
    if args.lib:
        print(json.dumps(evaluate(args.lib, seeds)))
        return
    rows = []
    for spec in args.table or []:
        name, python = spec.split("=", 1)
        cmd = [python, __file__, "--lib", name] + (["--quick"] if args.quick else [])
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode:
            rows.append({"lib": f"{name} (failed: {done.stderr.strip().splitlines()[-1]})"})
        else:
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(table(rows))


if __name__ == "__main__":
    main()
