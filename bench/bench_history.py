"""Bench section `history`: 10,000 results in the store, then `mlb history check` over them.

On SQLite (the default store) and on PostgreSQL (a throwaway server, tests/pg/server.py):
insert 10,000 records (one comparable series: the worst case for `check`, which runs the
change-point detection on every stage over all of them), then time `mlb history check` in a
fresh process (`history_child.py`: wall time of the command in-process, CLI start-up apart, and
the process's peak RSS). Targets: check < 5 s, memory < 500 MB (what the check adds to the
process; the CLI's own start-up, which imports torch, is shown apart).

`MLB_BENCH_QUICK=1`: 1,000 results instead of 10,000.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_common import ROOT, Row, mib, run_child, secs

sys.path.insert(0, str(ROOT / "tests"))

N_RESULTS = 1_000 if os.environ.get("MLB_BENCH_QUICK") == "1" else 10_000
STAGES = {"step": 0.0102, "data_wait": 2e-4, "forward": 3e-3, "backward": 6e-3, "optimizer": 1e-3}
CHECK_TARGET_S = 5.0
MEMORY_TARGET = 500 * 2**20


def _records(n: int) -> list:
    """n records of one series: 2% noise per sitting, backward 6% slower from the middle."""
    from mlbaseline.history.record import GitInfo, MetricSummary, Record

    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        level = rng.lognormal(0.0, 0.02)
        metrics = []
        for stage, base in STAGES.items():
            slower = 1.06 if stage == "backward" and i >= n // 2 else 1.0
            med = base * level * slower
            metrics.append(
                MetricSummary(
                    f"train.bs64.{stage}",
                    "s",
                    False,
                    med,
                    med * 0.99,
                    med * 1.01,
                    50,
                    1,
                    role="total" if stage == "step" else "stage",
                    group="train.bs64",
                )
            )
        body = f'{{"bench": {i}}}'.encode()
        out.append(
            Record(
                kind="throughput",
                status="complete",
                fingerprint="b" * 64,
                created_at=f"2026-01-01T00:00:00.{i:06d}Z",
                config_hash="c" * 64,
                subset_hash=None,
                path=f"/bench/{i}.json",
                sha256=hashlib.sha256(body).hexdigest(),
                git=GitInfo(f"{i:040x}", "main", False),
                metrics=tuple(metrics),
                body=body,
            )
        )
    return out


def _one(backend: str, location: str) -> list[Row]:
    from mlbaseline.history.store import open_store

    store = open_store(location)
    records = _records(N_RESULTS)
    start = time.perf_counter()
    for rec in records:
        store.add(rec)
    insert_s = time.perf_counter() - start
    store.close()
    child = run_child([str(ROOT / "bench" / "history_child.py"), location])
    if child.returncode != 0:
        raise RuntimeError(f"history check failed: {child.stderr.strip()[-300:]}")
    got = child.json()
    n = f"{N_RESULTS:,}"
    return [
        Row("history", f"{backend}: insert {n} results", secs(insert_s), "info", None),
        Row(
            "history",
            f"{backend}: mlb history check over {n} ({got['series']} series, "
            f"{got['change_points']} change points)",
            secs(got["check_s"]),
            f"< {CHECK_TARGET_S:.0f} s",
            got["check_s"] < CHECK_TARGET_S,
        ),
        Row("history", f"{backend}: CLI start-up before it", secs(got["startup_s"]), "info", None),
        Row(
            "history",
            f"{backend}: memory the check adds (peak RSS − RSS after CLI start-up)",
            mib(got["peak_rss"] - got["rss_after_startup"]),
            f"< {mib(MEMORY_TARGET)}",
            got["peak_rss"] - got["rss_after_startup"] < MEMORY_TARGET,
        ),
        Row(
            "history",
            f"{backend}: peak RSS of the check process (torch imported by the CLI)",
            mib(got["peak_rss"]),
            "info",
            None,
        ),
    ]


def history() -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="mlb-bench-history-") as tmp:
        rows += _one("SQLite", str(Path(tmp) / "history.sqlite"))
    try:
        from pg.server import create_database, running_server

        with running_server() as server:
            rows += _one("PostgreSQL", create_database(server, "mlb_bench_history"))
    except Exception as exc:  # no server here: a missed figure, not a lost table
        rows.append(Row("history", "PostgreSQL", f"not run: {exc}", "runs", False))
    return rows


__all__ = ["history"]
