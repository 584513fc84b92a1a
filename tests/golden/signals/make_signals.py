"""Regenerate the golden results the reproducibility and contamination signals are judged on.

    .venv/bin/python tests/golden/signals/make_signals.py

Derived, seeded and deterministic, from the real measured `tests/golden/report/throughput.json`
(one process, tiny_cnn on CPU), its `train.bs8` group only (files stay small):

- `replicated_quiet.json`: its steps dealt round-robin into 6 "processes", each scaled by its
  own level drawn lognormal(0, 0.3%): between-process noise far inside ±3% → the cv signal
  stays quiet;
- `replicated_noisy.json`: the same with levels lognormal(0, 15%) → the cv signal fires;
- `one_process.json`: the group as measured (no replicates) → cv is "not measured";
- `contaminated.json` / `clean.json`: the one-process group with a CPU account whose readers show
  0.9 / 0.05 cores of other programs' load → the contaminated signal fires / stays quiet.

Pooling, `data["noise"]` and the account go through the real code (pool_replicates, the
throughput runner's finish_result, measure.contamination.record).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlbaseline.measure.clock import ManualClock
from mlbaseline.measure.contamination import CpuAccount, record
from mlbaseline.measure.pooling import pool_replicates
from mlbaseline.results import Metric, Result, load_result, write_result
from mlbaseline.runners.throughput import finish_result

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "report" / "throughput.json"
GROUP = "train.bs8"
REPLICATES = 6


def _group(source: Result) -> Result:
    r = Result(kind="throughput", config=source.config, environment=source.environment)
    r.created_at = source.created_at
    r.measurements = {n: m for n, m in source.measurements.items() if n.startswith(GROUP + ".")}
    entry = source.data["batch_sizes"]["8"]
    r.data = {**source.data, "batch_sizes": {"8": {k: v for k, v in entry.items()
                                                   if k != "inference"}}}  # fmt: skip
    r.data.pop("telemetry", None)
    return r


def _replicated(one: Result, sd: float, seed: int) -> Result:
    levels = np.random.default_rng(seed).lognormal(0.0, sd, REPLICATES)
    children = []
    for i, level in enumerate(levels):
        child = Result(kind="throughput", config=one.config, environment=one.environment)
        child.data = {"batch_sizes": one.data["batch_sizes"]}
        for name, m in one.measurements.items():
            chunk = np.asarray(m.values)[i::REPLICATES]  # each "process" spans the whole run
            k = 1.0 / level if m.higher_is_better else level
            child.add_metric(Metric(name, m.unit, m.higher_is_better, list(chunk * k),
                                    meta=dict(m.meta)))  # fmt: skip
        children.append(child)
    out = Result(kind="throughput", config=one.config, environment=one.environment)
    out.created_at = one.created_at
    out.data = {k: v for k, v in one.data.items() if k != "batch_sizes"}
    out.data.update(repeats=REPLICATES, batch_sizes={})
    pool_replicates(out, children)
    finish_result(out)
    return out


def _accounted(one: Result, foreign: float) -> Result:
    clock = ManualClock()
    account = CpuAccount(
        0.25,
        clock,
        busy=lambda: clock.now_ns() / 1e9 * (1.0 + foreign),
        own=lambda: clock.now_ns() / 1e9,
        loadavg=lambda: (1.0 + foreign, 1.0, 1.0),
    )
    with account.phase(f"{GROUP}"):
        clock.advance(4.0)
    record(one, account)
    return one


def main() -> None:
    source = load_result(SOURCE)
    outputs = {
        "replicated_quiet.json": _replicated(_group(source), 0.003, 1),
        "replicated_noisy.json": _replicated(_group(source), 0.15, 2),
        "one_process.json": _group(source),
        "contaminated.json": _accounted(_group(source), 0.9),
        "clean.json": _accounted(_group(source), 0.05),
    }
    for name, result in outputs.items():
        write_result(result, HERE / name, force=True)
        print(HERE / name)


if __name__ == "__main__":
    main()
