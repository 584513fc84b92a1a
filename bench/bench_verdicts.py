"""Bench section `verdicts` (issue 24): on the default path a user takes, does a real slowdown fail
the gate, and does A/A stay quiet? Beside it, the paired `mlb ab` on the same change.

Default path, per pair: two `mlb throughput --profile demo --mode train --batch-sizes 16` runs
(fresh processes, auto replicates: no --repeats), then `mlb compare a.json b.json --json`.
A is the demo model (torchvision resnet18). B is, per condition:
- A/A: the same command again;
- +10% and 3×: `verdicts_models:slowed_resnet18` (bench/verdicts_models.py): resnet18 plus
  `extra` real matrix products in forward, `extra` calibrated in this process so that the
  training step is about 1.10× and 3× A's (`calibrate`).
Pairs run in rounds (every condition once per round, the order rotated; A first in even rounds,
B first in odd ones) so that the machine's drift hits all conditions alike. Every run's files stay
under bench/out/verdicts/RUN/ (git-ignored): COND/pairNN/{a,b}.json + .log, compare.json (the
compare result document), pair.json (exit codes, wall times, order); ab/COND/trialNN/; the
calibration, the run's meta and the history store the runs recorded themselves in. A pair is
labelled busy when either run's measured foreign CPU (`data.contamination.max_foreign_cores`)
exceeded that run's own contamination threshold.

The table is computed from the stored files only (`table_from`), so it can be recomputed without
measuring again, also after `mlb compare`'s statistics change (`--recompare` reruns `mlb compare`
on the stored results first; the first compare of each pair is kept as compare.first.json):

    make bench BENCH=verdicts                                       # 10 pairs per condition
    MLB_BENCH_VERDICTS_PAIRS=3 make bench BENCH=verdicts            # reduced
    .venv/bin/python bench/bench_verdicts.py --pairs 3 --ab-trials 2 [--commit HEAD]
    .venv/bin/python bench/bench_verdicts.py --reuse bench/out/verdicts/RUN [--recompare]
    MLB_BENCH_VERDICTS_REUSE=bench/out/verdicts/RUN MLB_BENCH_VERDICTS_RECOMPARE=1 \\
        make bench BENCH=verdicts

`--commit REV` (MLB_BENCH_VERDICTS_COMMIT) runs the CLI of a committed revision (`git archive`
into RUN/mlb-src) instead of the working tree, for when the tree is being edited mid-run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_common import BENCH, ROOT, Row, ms, pct, secs

OUT = BENCH / "out" / "verdicts"
PAIRS = int(os.environ.get("MLB_BENCH_VERDICTS_PAIRS", "10"))
AB_TRIALS = int(os.environ.get("MLB_BENCH_VERDICTS_AB_TRIALS", "3"))
AB_PAIRS = int(os.environ.get("MLB_BENCH_VERDICTS_AB_PAIRS", "55"))  # mlb ab's own default
TARGET_PAIRS = 10  # the targets are stated over 10 pairs
# directory name: (label, target B/A step ratio)
CONDITIONS: dict[str, tuple[str, float]] = {
    "aa": ("A/A", 1.0),
    "slow10": ("+10%", 1.10),
    "slow3x": ("3×", 3.0),
}
VERDICTS = ("regressed", "improved", "unchanged", "inconclusive", "insufficient data")
BELOW_MDE = ("inconclusive", "insufficient data")  # the tool says it cannot tell
BATCH = 16
STEP = f"train.bs{BATCH}.step"
GROUP = f"train.bs{BATCH}"
THROUGHPUT = ["throughput", "--profile", "demo", "--mode", "train", "--batch-sizes", str(BATCH)]
MODEL = "verdicts_models:slowed_resnet18"


# ---------------------------------------------------------------- calibration arithmetic


def units_for(target_ratio: float, base_s: float, unit_s: float) -> int:
    """Units of extra work that make a `base_s` step `target_ratio` times as long, when one unit
    costs `unit_s` (at least 1 for a slowdown, 0 for none)."""
    if target_ratio <= 1.0:
        return 0
    return max(1, round((target_ratio - 1.0) * base_s / unit_s))


def refine_units(target_ratio: float, base_s: float, slowed_s: float, units: int) -> int:
    """A second guess from a measured step: `units` made the step `slowed_s` (vs `base_s`), so one
    unit costs (slowed_s − base_s) / units inside the step; units_for with that cost. Keeps
    `units` when the measurement shows no slowdown (noise): there is nothing to scale by."""
    if units <= 0 or slowed_s <= base_s:
        return units
    return units_for(target_ratio, base_s, (slowed_s - base_s) / units)


def close_enough(target_ratio: float, measured_ratio: float, tolerance: float = 0.1) -> bool:
    """Within `tolerance` of the intended slowdown itself (±1 point of a +10% step, ±0.2 of a
    3× one): then a second guess would chase the calibration's own noise."""
    return abs(measured_ratio - target_ratio) <= tolerance * abs(target_ratio - 1.0)


def _train_setup(extra: int) -> tuple[Any, Callable[[], None]]:
    """The demo's training step (resnet18, batch 16, the profile's image size and classes,
    SGD, cross-entropy) on the slowed model; returns (model, step)."""
    import torch
    import verdicts_models as vm
    import yaml

    # the profile's file, not mlbaseline.config: the package may be mid-edit in a shared tree
    w = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text(encoding="utf-8"))["workload"]
    size, classes = int(w["image_size"]), int(w["num_classes"])
    torch.manual_seed(0)
    model = vm.SlowedResNet18(classes, extra)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)  # the default workload.optimizer_kwargs
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(BATCH, 3, size, size)
    y = torch.randint(0, classes, (BATCH,))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    return model, step


def _timed(fn: Callable[[], None], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _ratio(
    model: Any, step: Callable[[], None], extra: int, rounds: int = 6
) -> tuple[float, float]:
    """(base step, slowed step) medians, interleaved in rounds of 4 steps each."""
    base: list[float] = []
    slowed: list[float] = []
    for _ in range(rounds):
        model.work.extra = 0
        base += _timed(step, 4)
        model.work.extra = extra
        slowed += _timed(step, 4)
    model.work.extra = 0
    return statistics.median(base), statistics.median(slowed)


def calibrate() -> dict[str, Any]:
    """In this process, on one thread like the demo: the base step, one unit's cost, and per
    slowdown condition a first guess, one refinement from a measured step, and the step ratio
    measured at the final `extra`."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, step = _train_setup(0)
        _timed(step, 5)  # warm-up
        base = statistics.median(_timed(step, 12))
        model.work.extra = 200
        unit = statistics.median(_timed(model.work, 5)) / 200
        model.work.extra = 0
        out: dict[str, Any] = {"base_step_s": base, "unit_s": unit, "conditions": {}}
        for cond, (_, target) in CONDITIONS.items():
            if target <= 1.0:
                continue
            first = units_for(target, base, unit)
            b0, s0 = _ratio(model, step, first)
            close = close_enough(target, s0 / b0)
            final = first if close else refine_units(target, b0, s0, first)
            b1, s1 = _ratio(model, step, final) if final != first else (b0, s0)
            out["conditions"][cond] = {
                "target_ratio": target,
                "first_guess": first,
                "first_ratio": s0 / b0,
                "extra": final,
                "measured_ratio": s1 / b1,
                "base_step_s": b1,
            }
    finally:
        torch.set_num_threads(threads)
    return out


# ---------------------------------------------------------------- running the CLI


@dataclass(frozen=True)
class Ctx:
    """Where a run's files go and which mlb runs them."""

    run_dir: Path
    src: Path  # the folder holding the `mlbaseline` package that runs
    extra: dict[str, int]  # condition → model kwarg extra (0: the plain model)

    @property
    def history(self) -> Path:
        return self.run_dir / "history.sqlite"


def _env(ctx: Ctx) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ctx.src), env.get("PYTHONPATH")) if p)
    env["MLB_HISTORY"] = str(ctx.history)  # the runs' own history, kept with them
    return env


def mlb(args: Sequence[str], ctx: Ctx, log: Path | None, timeout_s: float = 900) -> dict[str, Any]:
    """`python -m mlbaseline ARGS` from ctx.src (cwd too: `-m` puts the cwd first on sys.path);
    stderr to `log`; returns rc, wall and stdout."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "mlbaseline", *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=ctx.src,
            env=_env(ctx),
        )
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = -9, "", f"timed out after {timeout_s:.0f} s: {exc}"
    wall = time.perf_counter() - start
    if log is not None:
        log.write_text(err, encoding="utf-8")
    return {"rc": rc, "wall_s": wall, "stdout": out, "stderr_tail": err.strip()[-400:]}


def b_overrides(extra: int, flag: str = "--set") -> list[str]:
    """The B side's model: the slowed workload with `extra` units (nothing for extra 0)."""
    if extra <= 0:
        return []
    return [
        flag,
        f"workload.import_paths={json.dumps([str(BENCH)])}",
        flag,
        f"workload.model={MODEL}",
        flag,
        f"workload.model_kwargs.extra={extra}",
    ]


def compare_pair(pair_dir: Path, ctx: Ctx) -> dict[str, Any]:
    """`mlb compare a.json b.json --json` → compare.json (the first one kept as
    compare.first.json when this is a recompare); rc and wall."""
    a, b = pair_dir / "a.json", pair_dir / "b.json"
    if not (a.exists() and b.exists()):
        return {"rc": None, "wall_s": 0.0, "stderr_tail": "a run wrote no result"}
    target = pair_dir / "compare.json"
    first = pair_dir / "compare.first.json"
    if target.exists() and not first.exists():
        shutil.copy2(target, first)
    run = mlb(["compare", str(a), str(b), "--json"], ctx, pair_dir / "compare.log", 300)
    target.write_text(run.pop("stdout"), encoding="utf-8")
    return run


def run_pair(pair_dir: Path, cond: str, b_first: bool, ctx: Ctx) -> dict[str, Any]:
    """One pair of the default path: both throughput runs (in the given order), then compare."""
    pair_dir.mkdir(parents=True, exist_ok=True)
    extra = ctx.extra.get(cond, 0)
    order = ["b", "a"] if b_first else ["a", "b"]
    runs = {}
    for side in order:
        args = [*THROUGHPUT, "-o", str(pair_dir / f"{side}.json"), "--force"]
        args += b_overrides(extra) if side == "b" else []
        runs[side] = mlb(args, ctx, pair_dir / f"{side}.log")
        runs[side].pop("stdout")
    cmp = compare_pair(pair_dir, ctx)
    meta = {
        "condition": cond,
        "extra": extra,
        "order": order,
        "runs": runs,
        "compare": cmp,
        "wall_s": sum(r["wall_s"] for r in runs.values()) + cmp["wall_s"],
    }
    (pair_dir / "pair.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    return meta


def run_ab_trial(trial_dir: Path, cond: str, pairs: int, ctx: Ctx) -> dict[str, Any]:
    """`mlb ab` on the same change, both arms in one process, `pairs` pairs."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    args = ["ab", "--profile", "demo", "--set", "throughput.mode=train"]
    args += ["--set", f"throughput.batch_sizes=[{BATCH}]", "--pairs", str(pairs)]
    args += b_overrides(ctx.extra.get(cond, 0), "--set-b")
    args += ["-o", str(trial_dir / "ab.json"), "--force"]
    run = mlb(args, ctx, trial_dir / "ab.log")
    run.pop("stdout")
    meta = {"condition": cond, "extra": ctx.extra.get(cond, 0), "pairs": pairs, "run": run}
    (trial_dir / "trial.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    return meta


# ---------------------------------------------------------------- one measured run


def mlb_source(run_dir: Path, commit: str | None) -> tuple[Path, dict[str, Any]]:
    """The folder whose `mlbaseline` runs, and what it is: the working tree (its HEAD and
    whether mlbaseline/ had uncommitted changes at the start), or `git archive COMMIT`."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    if not commit:
        dirty = bool(git("status", "--porcelain", "--", "mlbaseline"))
        return ROOT, {"source": "working tree", "head": git("rev-parse", "HEAD"), "dirty": dirty}
    sha = git("rev-parse", f"{commit}^{{commit}}")
    src = run_dir / "mlb-src"
    src.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", sha, "mlbaseline", "configs", "pyproject.toml"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    return src, {"source": f"git archive {commit}", "head": sha, "dirty": False}


def _schedule(pairs: int, ab_trials: int) -> list[tuple[str, str, int]]:
    """(kind, condition, index) in run order: rounds of every condition, rotated per round;
    one ab trial per condition in each of the first `ab_trials` rounds."""
    conds = list(CONDITIONS)
    out: list[tuple[str, str, int]] = []
    for r in range(max(pairs, ab_trials)):
        turn = conds[r % len(conds) :] + conds[: r % len(conds)]
        out += [("pair", c, r) for c in turn if r < pairs]
        out += [("ab", c, r) for c in turn if r < ab_trials]
    return out


def _machine() -> str:
    try:
        from run import machine

        return machine()
    except Exception as exc:  # mlbaseline.envinfo mid-edit in a shared tree
        import platform

        return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs ({exc})"


def measure(pairs: int, ab_trials: int, ab_pairs: int, commit: str | None = None) -> Path:
    """Calibrate, then run every pair and ab trial; returns the run's folder."""
    run_dir = OUT / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    run_dir.mkdir(parents=True)
    src, source = mlb_source(run_dir, commit)
    cal = calibrate()
    (run_dir / "calibration.json").write_text(json.dumps(cal, indent=1), encoding="utf-8")
    extra = {c: cal["conditions"].get(c, {}).get("extra", 0) for c in CONDITIONS}
    meta = {
        "machine": _machine(),
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "pairs": pairs,
        "ab_trials": ab_trials,
        "ab_pairs": ab_pairs,
        "mlb": source,
        "extra": extra,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
    }
    (run_dir / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    ctx = Ctx(run_dir, src, extra)
    start = time.perf_counter()
    for kind, cond, i in _schedule(pairs, ab_trials):
        if kind == "pair":
            done = run_pair(run_dir / cond / f"pair{i:02d}", cond, i % 2 == 1, ctx)
        else:
            done = run_ab_trial(run_dir / "ab" / cond / f"trial{i:02d}", cond, ab_pairs, ctx)
        wall = done["wall_s"] if kind == "pair" else done["run"]["wall_s"]
        print(f"[bench] verdicts {kind} {cond} #{i}: {wall:.0f} s", file=sys.stderr, flush=True)
    meta["wall_s"] = time.perf_counter() - start
    (run_dir / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    return run_dir


def recompare(run_dir: Path, commit: str | None = None) -> None:
    """Rerun `mlb compare` on every stored pair (no measuring); pair.json gets the new rc."""
    src, source = mlb_source(run_dir / "recompare", commit) if commit else mlb_source(run_dir, None)
    meta = json.loads((run_dir / "meta.json").read_text(encoding="utf-8"))
    ctx = Ctx(run_dir, src, meta["extra"])
    for pair_json in sorted(run_dir.glob("*/pair*/pair.json")):
        pair = json.loads(pair_json.read_text(encoding="utf-8"))
        pair.setdefault("first_compare", pair["compare"])
        pair["compare"] = {**compare_pair(pair_json.parent, ctx), "mlb": source}
        pair_json.write_text(json.dumps(pair, indent=1), encoding="utf-8")


# ---------------------------------------------------------------- the table, from stored files


def _load(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def norm_verdict(v: str | None) -> str:
    return "no result" if not v else v.replace("_", " ")


def headline(data: dict[str, Any]) -> dict[str, Any] | None:
    """The step metric of a compare document (role total; by name when no role is set)."""
    metrics = data.get("metrics", [])
    for m in metrics:
        if m.get("role") == "total" and m.get("metric", "").startswith(GROUP):
            return m
    return next((m for m in metrics if m.get("metric") == STEP), None)


def step_median(doc: dict[str, Any] | None) -> float | None:
    """The median over replicates of each replicate's median step time of a throughput result."""
    m = (doc or {}).get("measurements", {}).get(STEP)
    if not m or not m.get("values"):
        return None
    reps = m.get("replicate") or [0] * len(m["values"])
    by: dict[Any, list[float]] = {}
    for r, v in zip(reps, m["values"], strict=False):
        by.setdefault(r, []).append(v)
    return statistics.median(statistics.median(vs) for vs in by.values())


def run_load(doc: dict[str, Any] | None) -> tuple[float | None, bool, int | None, str | None]:
    """(max foreign cores, above the run's own threshold, replicates, why auto stopped)."""
    data = (doc or {}).get("data", {})
    cont = data.get("contamination") or {}
    foreign = cont.get("max_foreign_cores")
    busy = foreign is not None and foreign > cont.get("threshold_cores", 0.25)
    plan = data.get("replicate_plan") or {}
    return foreign, busy, plan.get("replicates"), plan.get("stop")


def summarize_pair(
    meta: dict[str, Any],
    compare: dict[str, Any] | None,
    a: dict[str, Any] | None,
    b: dict[str, Any] | None,
) -> dict[str, Any]:
    """What the table needs of one pair (pure: tests feed it fake documents)."""
    data = (compare or {}).get("data") or {}
    step = headline(data) or {}
    named = [
        s for att in data.get("attribution", []) if att.get("group") == GROUP for s in att["named"]
    ]
    loads = [run_load(a), run_load(b)]
    foreign = [f for f, _, _, _ in loads if f is not None]
    base, slowed = step_median(a), step_median(b)
    return {
        "verdict": norm_verdict(step.get("verdict")),
        "rc": (meta.get("compare") or {}).get("rc"),
        "failed": data.get("failed"),
        "change": step.get("change"),
        "ci": (step.get("ci_low"), step.get("ci_high")),
        "mde": step.get("mde"),
        "named": named,
        "foreign": max(foreign) if foreign else None,
        "busy": any(busy for _, busy, _, _ in loads),
        "replicates": [n for _, _, n, _ in loads],
        "stops": [s for _, _, _, s in loads],
        "wall_s": meta.get("wall_s"),
        "ratio": slowed / base if base and slowed else None,
    }


def read_pairs(run_dir: Path, cond: str) -> list[dict[str, Any]]:
    out = []
    for pair_json in sorted((run_dir / cond).glob("pair*/pair.json")):
        d = pair_json.parent
        meta = _load(pair_json) or {}
        out.append(
            summarize_pair(
                meta, _load(d / "compare.json"), _load(d / "a.json"), _load(d / "b.json")
            )
        )
    return out


def ci_excludes_1(p: dict[str, Any]) -> bool:
    lo, hi = p["ci"]
    return lo is not None and hi is not None and (lo > 1.0 or hi < 1.0)


UNCHANGED_OK = "unchanged (CI includes 1)"  # the rule's letter: only a CI excluding 1 fails


def pair_outcome(cond: str, p: dict[str, Any]) -> str:
    """The pair against its condition's target: 'caught' / 'below MDE' / UNCHANGED_OK / 'quiet'
    (pass) or 'missed' / 'unchanged though the CI excludes 1' / 'false regression' / 'failed
    run' (fail)."""
    v = p["verdict"]
    if p["rc"] not in (0, 1):
        return "failed run"
    if cond == "aa":
        return "false regression" if p["rc"] == 1 else "quiet"
    if p["rc"] == 1 and v == "regressed":
        return "caught"
    if cond == "slow3x":
        return "missed"
    if v in BELOW_MDE:
        return "below MDE"
    if v == "unchanged":
        return "unchanged though the CI excludes 1" if ci_excludes_1(p) else UNCHANGED_OK
    return "missed"


PASS = ("caught", "below MDE", UNCHANGED_OK, "quiet")
TARGETS = {
    "aa": "false regressions (exit 1) ≤ 1/10",
    "slow10": "caught or declared below the MDE 10/10 (never unchanged with the step's CI "
    "excluding 1)",
    "slow3x": "caught (exit 1, step regressed) 10/10",
}


def _counts(items: Sequence[Any], keys: Sequence[Any] = (), sep: str = " ") -> str:
    """'regressed 2, improved 0' (every key in `keys`, then the others); sep '×' for numbers:
    'exit 1×2, 0×1' (value × how often)."""
    c = Counter(items)
    order = [*keys, *sorted((k for k in c if k not in keys), key=str)]
    return ", ".join(f"{k}{sep}{c[k]}" for k in order if k in keys or c[k])


def _median_of(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _fmt(x: float | None, f: Callable[[float], str]) -> str:
    return "n/a" if x is None else f(x)


def target_met(cond: str, outcomes: Sequence[str]) -> bool:
    """Met only over at least TARGET_PAIRS pairs: A/A at most one false regression in ten,
    the slowdowns every pair passing."""
    n = len(outcomes)
    if n < TARGET_PAIRS:
        return False
    if cond == "aa":
        return sum(o != "quiet" for o in outcomes) * TARGET_PAIRS <= n
    return all(o in PASS for o in outcomes)


def verdict_row(cond: str, pairs: list[dict[str, Any]], extra: int) -> Row:
    label = CONDITIONS[cond][0]
    n = len(pairs)
    outcomes = [pair_outcome(cond, p) for p in pairs]
    what = "same command twice" if cond == "aa" else f"B = resnet18 + extra={extra}"
    return Row(
        "verdicts",
        f"{label} ({what}): default path (2× mlb throughput, auto replicates; mlb compare): "
        "step verdicts; compare exit codes; pairs against the target",
        f"{n}/{TARGET_PAIRS} pairs: {_counts([p['verdict'] for p in pairs], VERDICTS)}; "
        f"exit {_counts([p['rc'] for p in pairs], sep='×') or 'none'}; {_counts(outcomes)}",
        TARGETS[cond],
        target_met(cond, outcomes),
    )


def detail_rows(cond: str, pairs: list[dict[str, Any]]) -> list[Row]:
    label = CONDITIONS[cond][0]
    named = Counter(s for p in pairs for s in p["named"])
    top = named.most_common(1)
    firsts = Counter(p["named"][0] for p in pairs if p["named"])
    stage = (
        f"{top[0][0]} ({top[0][1]}/{len(pairs)} pairs; all named: "
        f"{_counts(list(named.elements()))}; named first: {_counts(list(firsts.elements()))})"
        if top
        else f"none named in {len(pairs)} pairs"
    )
    reps = [r for p in pairs for r in p["replicates"] if r is not None]
    stops = [s for p in pairs for s in p["stops"] if s]
    foreign = [p["foreign"] for p in pairs if p["foreign"] is not None]
    busy = sum(p["busy"] for p in pairs)
    return [
        Row(
            "verdicts", f"{label}: stage named by the attribution, most often", stage, "shown", None
        ),
        Row(
            "verdicts",
            f"{label}: headline MDE of the step (role total), median; B/A step ratio from the "
            "two results' replicate medians, median",
            f"MDE {_fmt(_median_of([p['mde'] for p in pairs]), pct)}; "
            f"B/A ×{_fmt(_median_of([p['ratio'] for p in pairs]), lambda x: f'{x:.3f}')}",
            "shown",
            None,
        ),
        Row(
            "verdicts",
            f"{label}: wall per pair (2 runs + compare), median; replicates auto ended on; "
            "pairs busy / idle (measured foreign CPU above the run's threshold)",
            f"{_fmt(_median_of([p['wall_s'] for p in pairs]), secs)}; replicates "
            f"{_counts(reps, sep='×')} (stop: {_counts(stops)}); "
            f"busy {busy} / idle {len(pairs) - busy} "
            f"(max foreign {_fmt(max(foreign, default=None), lambda x: f'{x:.2f}')} cores)",
            "shown",
            None,
        ),
    ]


def calibration_row(cal: dict[str, Any]) -> Row:
    parts = [
        f"{CONDITIONS[c][0]}: extra={d['extra']} → step ×{d['measured_ratio']:.3f} of "
        f"{_fmt(d.get('base_step_s'), ms)} (first guess {d['first_guess']}: "
        f"×{d['first_ratio']:.3f})"
        for c, d in cal.get("conditions", {}).items()
    ]
    return Row(
        "verdicts",
        "calibration in the bench process (demo step, 1 thread; one unit = one 256×256 "
        "matmul in forward): kwargs and the measured step ratio",
        f"{'; '.join(parts)}; unit alone {ms(cal['unit_s'])} (beside a {ms(cal['base_step_s'])} "
        "step)",
        "≈ ×1.10 and ≈ ×3",
        None,
    )


def summarize_ab(meta: dict[str, Any], doc: dict[str, Any] | None) -> dict[str, Any]:
    data = (doc or {}).get("data") or {}
    stages = {s.get("stage"): s for s in data.get("stages", [])}
    step = stages.get("step", {})
    foreign, busy, _, _ = run_load(doc)
    return {
        "verdict": norm_verdict(data.get("verdict")),
        "rc": (meta.get("run") or {}).get("rc"),
        "ratio": step.get("ratio"),
        "step_verdict": norm_verdict(step.get("verdict")),
        "named": [s for s, d in stages.items() if s != "step" and d.get("verdict") == "regressed"],
        "pairs": data.get("pairs_done"),
        "wall_s": (meta.get("run") or {}).get("wall_s"),
        "foreign": foreign,
        "busy": busy,
    }


def ab_row(cond: str, trials: list[dict[str, Any]]) -> Row:
    label = CONDITIONS[cond][0]
    named = Counter(s for t in trials for s in t["named"])
    ratios = ", ".join(_fmt(t["ratio"], lambda x: f"×{x:.3f}") for t in trials)
    busy = sum(t["busy"] for t in trials)
    sizes = "/".join(sorted({str(t["pairs"]) for t in trials}))
    codes = _counts([t["rc"] for t in trials], sep="×") or "none"
    return Row(
        "verdicts",
        f"{label}: beside it, mlb ab (paired, both arms in one process, "
        f"{sizes} pairs): verdict; exit codes; step B/A per trial; stages named (regressed); "
        "wall per trial, median",
        f"{len(trials)} trials: {_counts([t['verdict'] for t in trials], VERDICTS[:4])}; "
        f"exit {codes}; step {ratios or 'n/a'}; named: "
        f"{_counts(list(named.elements())) or 'none'}; "
        f"{_fmt(_median_of([t['wall_s'] for t in trials]), secs)}; busy {busy}",
        "shown beside",
        None,
    )


def read_ab(run_dir: Path, cond: str) -> list[dict[str, Any]]:
    return [
        summarize_ab(_load(t) or {}, _load(t.parent / "ab.json"))
        for t in sorted((run_dir / "ab" / cond).glob("trial*/trial.json"))
    ]


def table_from(run_dir: Path) -> list[Row]:
    """The section's rows from a run's stored files alone (no measuring, no compare)."""
    run_dir = Path(run_dir)
    meta = _load(run_dir / "meta.json") or {}
    cal = _load(run_dir / "calibration.json")
    rows = [calibration_row(cal)] if cal else []
    for cond in CONDITIONS:
        pairs = read_pairs(run_dir, cond)
        rows.append(verdict_row(cond, pairs, (meta.get("extra") or {}).get(cond, 0)))
        rows += detail_rows(cond, pairs)
        trials = read_ab(run_dir, cond)
        if trials:
            rows.append(ab_row(cond, trials))
    src = meta.get("mlb") or {}
    rows.append(
        Row(
            "verdicts",
            "stored runs (recompute: bench_verdicts.py --reuse DIR [--recompare]); mlb measured",
            f"{run_dir.relative_to(ROOT) if run_dir.is_relative_to(ROOT) else run_dir}; "
            f"{src.get('source', '?')} at {str(src.get('head', '?'))[:10]}"
            f"{' (mlbaseline/ dirty)' if src.get('dirty') else ''}; "
            f"{_fmt(meta.get('wall_s'), lambda x: f'{x / 60:.0f} min')} in all",
            "kept",
            None,
        )
    )
    return rows


# ---------------------------------------------------------------- entry points


def verdicts() -> list[Row]:
    """The `make bench` section: measure (MLB_BENCH_VERDICTS_PAIRS / _AB_TRIALS / _AB_PAIRS /
    _COMMIT), or with MLB_BENCH_VERDICTS_REUSE=DIR the table of stored runs (after rerunning
    compare on them when MLB_BENCH_VERDICTS_RECOMPARE is set)."""
    commit = os.environ.get("MLB_BENCH_VERDICTS_COMMIT") or None
    reuse = os.environ.get("MLB_BENCH_VERDICTS_REUSE")
    if reuse:
        run_dir = Path(reuse).resolve()
        if os.environ.get("MLB_BENCH_VERDICTS_RECOMPARE"):
            recompare(run_dir, commit)
        return table_from(run_dir)
    return table_from(measure(PAIRS, AB_TRIALS, AB_PAIRS, commit))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=PAIRS, help="pairs per condition")
    parser.add_argument("--ab-trials", type=int, default=AB_TRIALS, help="mlb ab per condition")
    parser.add_argument("--ab-pairs", type=int, default=AB_PAIRS, help="pairs of each mlb ab")
    parser.add_argument("--commit", help="run the CLI of this revision (git archive)")
    parser.add_argument("--reuse", type=Path, help="a stored run's folder: table only")
    parser.add_argument("--recompare", action="store_true", help="with --reuse: compare again")
    args = parser.parse_args(argv)
    from run import render

    start = time.perf_counter()
    if args.reuse:
        run_dir = args.reuse.resolve()
        if args.recompare:
            recompare(run_dir, args.commit)
    else:
        run_dir = measure(args.pairs, args.ab_trials, args.ab_pairs, args.commit)
    table = render(table_from(run_dir), time.perf_counter() - start)
    (run_dir / "table.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    print(f"[bench] table in {run_dir / 'table.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
