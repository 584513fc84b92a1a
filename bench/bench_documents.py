"""Bench section `documents` (issue 25): what validating a result file on reading costs.

A throughput result with 10 metrics × 100,000 samples (~20 MB, built on the committed real
1.0 file) is loaded in fresh processes (`documents_child.py`), interleaved: by mlb's loader
(pydantic v2: the document parsed once by json.loads for the Result, and validated from its
bytes against the kind's model) and by the 1.0 loader (json.loads and top-level checks). Targets
(issue 25): at most 1.5× the time and 2× the peak memory the loads add to the process.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

import numpy as np
from bench_common import ROOT, Row, interleave, mib, ms, run_child

METRICS, SAMPLES, ROUNDS, REPEATS = 10, 100_000, 3, 3
TIME_TARGET, MEMORY_TARGET = 1.5, 2.0


def big_result(path: Path) -> int:
    """The committed 1.0 throughput file with METRICS metrics of SAMPLES samples each."""
    doc = json.loads((ROOT / "tests/data/schema_1_0/throughput.json").read_text())
    rng = np.random.default_rng(0)
    template = next(iter(doc["measurements"].values()))
    doc["measurements"] = {
        f"train.bs4.m{i}": {
            **template,
            "name": f"train.bs4.m{i}",
            "values": rng.lognormal(-4.0, 0.1, SAMPLES).tolist(),
            "replicate": [j % 10 for j in range(SAMPLES)],
        }
        for i in range(METRICS)
    }
    doc["summary"]["metrics"] = {}
    path.write_text(json.dumps(doc))
    return path.stat().st_size


def _child(arm: str, path: Path) -> dict[str, float]:
    run = run_child([str(ROOT / "bench" / "documents_child.py"), arm, str(path), str(REPEATS)])
    out: dict[str, float] = run.json()
    return out


def documents() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="mlb-bench-docs-") as tmp:
        path = Path(tmp) / "big.json"
        size = big_result(path)
        runs = interleave(
            {arm: (lambda a=arm: _child(a, path)) for arm in ("plain", "validated")}, ROUNDS
        )
    med = {a: statistics.median(r["load_s"] for r in rs) for a, rs in runs.items()}
    mem = {a: statistics.median(r["peak_added"] for r in rs) for a, rs in runs.items()}
    t_ratio, m_ratio = med["validated"] / med["plain"], mem["validated"] / mem["plain"]
    what = f"{METRICS} metrics × {SAMPLES:,} samples, {mib(size)}"
    return [
        Row(
            "documents",
            f"load with validation vs the 1.0 loader ({what}), median of {ROUNDS} fresh "
            f"processes, best of {REPEATS} loads each",
            f"×{t_ratio:.2f} ({ms(med['validated'])} vs {ms(med['plain'])})",
            f"≤ ×{TIME_TARGET}",
            t_ratio <= TIME_TARGET,
        ),
        Row(
            "documents",
            "peak memory the load adds to the process (VmHWM), with validation vs without",
            f"×{m_ratio:.2f} ({mib(mem['validated'])} vs {mib(mem['plain'])})",
            f"≤ ×{MEMORY_TARGET}",
            m_ratio <= MEMORY_TARGET,
        ),
    ]
