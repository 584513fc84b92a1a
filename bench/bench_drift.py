"""Bench section `drift` (issue 15 item 1): what the between-process drift of the demo training
step is made of, and which process settings change it.

Every setting runs in its own fresh process (`bench/drift_child.py`), all settings once per
round in a rotating order, so a change in the machine's load hits every setting alike. Per
setting: the spread and CV of the process medians, the in-process CV, the same figures for the
step divided by a fixed control matmul timed after every step (machine-speed normalized), and
the foreign CPU (busy cores not from the child) and steal while it ran.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
from bench_common import BENCH, Row, cv, pct, run_child, spread

SETTINGS = tuple(
    os.environ.get("MLB_BENCH_DRIFT_SETTINGS", "base,pin,threads2,denormal,warm,malloc,thp,noaslr")
    .replace(" ", "")
    .split(",")
)
MALLOC_ENV = {
    "MALLOC_ARENA_MAX": "1",
    "MALLOC_TRIM_THRESHOLD_": "268435456",
    "MALLOC_MMAP_THRESHOLD_": "268435456",
    "MALLOC_TOP_PAD_": "67108864",
}
ROUNDS = int(os.environ.get("MLB_BENCH_DRIFT_ROUNDS", "4"))
STEPS = int(os.environ.get("MLB_BENCH_DRIFT_STEPS", "40"))


TIMEOUT_S = 150.0  # a child that takes this long is itself a finding (threads2 did: >300 s)


def _child(setting: str) -> dict[str, Any] | None:
    """One fresh process of `setting`; None when it ran past TIMEOUT_S."""
    extra = {"malloc": MALLOC_ENV, "thp": {"THP_MEM_ALLOC_ENABLE": "1"}}.get(setting, {})
    old = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        args = [str(BENCH / "drift_child.py"), setting, str(STEPS), "15"]
        return run_child(args, timeout_s=TIMEOUT_S).json()
    except subprocess.TimeoutExpired:
        return None
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def study(
    settings: tuple[str, ...] = SETTINGS, rounds: int = ROUNDS, save: Path | None = None
) -> dict[str, list[dict | None]]:
    out: dict[str, list[dict | None]] = {s: [] for s in settings}
    for r in range(rounds):
        k = r % len(settings)
        for s in settings[k:] + settings[:k]:  # rotate: each setting leads once per cycle
            out[s].append(_child(s))
            if save is not None:  # a long study keeps what it has
                save.write_text(json.dumps(out), encoding="utf-8")
    return out


def summarize(all_runs: list[dict[str, Any] | None]) -> dict[str, float]:
    runs = [r for r in all_runs if r is not None]
    if len(runs) < 2:
        return {"timeouts": float(len(all_runs) - len(runs)), "n": float(len(runs))}
    med = [float(np.median(r["step_s"])) for r in runs]
    norm = [float(np.median(np.divide(r["step_s"], r["control_s"]))) for r in runs]
    ctrl = [float(np.median(r["control_s"])) for r in runs]
    # within one process: the spread of medians of 10-step windows, against that of processes
    wins = [
        spread([float(np.median(r["step_s"][i : i + 10])) for i in range(0, len(r["step_s"]), 10)])
        for r in runs
    ]
    return {
        "win_spread": float(np.median(wins)),
        "median_ms": float(np.median(med)) * 1e3,
        "spread": spread(med),
        "cv": cv(med),
        "in_cv": float(np.median([cv(r["step_s"]) for r in runs])),
        "norm_spread": spread(norm),
        "norm_cv": cv(norm),
        "ctrl_spread": spread(ctrl),
        "corr": float(np.corrcoef(med, ctrl)[0, 1]) if len(runs) > 2 else float("nan"),
        "foreign": float(np.mean([r["foreign_cores"] for r in runs])),
        "steal": float(np.mean([r["steal_cores"] for r in runs])),
        "timeouts": float(len(all_runs) - len(runs)),
        "n": float(len(runs)),
    }


def drift() -> list[Row]:
    runs = study()
    rows = []
    for s, rs in runs.items():
        m = summarize(rs)
        if m["n"] < 2:
            rows.append(
                Row(
                    "drift",
                    f"{s}: fresh processes",
                    f"{m['timeouts']:.0f} ran past {TIMEOUT_S:.0f} s, {m['n']:.0f} finished",
                    "shown",
                    None,
                )
            )
            continue
        rows.append(
            Row(
                "drift",
                f"{s}: {len(rs)} fresh processes × {STEPS} steps, demo step bs16 "
                "(median; spread/CV of process medians; in-process CV; timeouts)",
                f"{m['median_ms']:.1f} ms; {pct(m['spread'])} / {pct(m['cv'])}; "
                f"{pct(m['in_cv'])}; {m['timeouts']:.0f}",
                "shown",
                None,
            )
        )
        rows.append(
            Row(
                "drift",
                f"{s}: spread of 10-step window medians inside one process (median over "
                "processes), against the spread between processes",
                f"{pct(m['win_spread'])} vs {pct(m['spread'])}",
                "shown",
                None,
            )
        )
        rows.append(
            Row(
                "drift",
                f"{s}: step ÷ control matmul (spread / CV of process medians); control's own "
                "spread; corr(step, control) over processes; foreign / steal cores",
                f"{pct(m['norm_spread'])} / {pct(m['norm_cv'])}; {pct(m['ctrl_spread'])}; "
                f"{m['corr']:+.2f}; {m['foreign']:.2f} / {m['steal']:.3f}",
                "shown",
                None,
            )
        )
    return rows


if __name__ == "__main__":
    import sys

    res = study(save=Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/drift.json"))
    for s, rs in res.items():
        print(s, {k: round(v, 4) for k, v in summarize(rs).items()})
