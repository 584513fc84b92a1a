"""The cost of `mlb attach`'s hooks per step, paired inside one process (bench section `attach`).

A process-level comparison (the plain script against the script under `mlb attach`, each in its
own process) cannot see 1%: two processes of the same script differ by ±3% on this machine. Here
one process alternates blocks of STEPS steps with the hooks and attach's measuring sink installed
(the stop rule, the telemetry sampler and the memory readings running, as under `mlb attach`)
and blocks with them uninstalled, ROUNDS times, hooked first in every other round; each
round's hooked block median minus its plain block median is one paired difference. Prints one
JSON line: the step (plain), the added seconds per step (median of the rounds), their spread.

Usage: attach_overhead_child.py ROUNDS STEPS BATCH [KEY=VALUE…]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any


def main() -> None:
    import torch
    from bench_attach import bench_model
    from torch.utils.data import DataLoader, TensorDataset

    from mlbaseline.config import Config, build, parse_set
    from mlbaseline.measure import hooks
    from mlbaseline.runners.attach_child import MeasureSink

    rounds, steps, batch = (int(a) for a in sys.argv[1:4])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    ds = TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
    loader = DataLoader(ds, batch_size=batch, shuffle=True)
    model, opt = bench_model()  # bench/ is this script's folder, on sys.path
    batches: Any = iter(loader)

    def block(n: int) -> float:
        """The median step of n steps, loop top to loop top (data wait included)."""
        nonlocal batches
        times, last = [], None
        for _ in range(n):
            try:
                x, y = next(batches)
            except StopIteration:
                batches = iter(loader)
                x, y = next(batches)
            now = time.perf_counter()
            if last is not None:
                times.append(now - last)
            last = now
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return statistics.median(times)

    # a stop rule that never ends inside the bench: every hooked step goes to the sink
    never = ["throughput.min_time_s=1000000", "throughput.max_steps=100000000"]
    never += sys.argv[4:]  # more KEY=VALUE settings (throughput.telemetry=false, say)
    cfg = build(Config, parse_set(never))
    sink = MeasureSink(cfg, lambda event: None, None, {})
    block(steps)  # warm-up, unhooked
    plain, added = [], []
    for i in range(rounds):
        # the two blocks' order alternates round by round: whichever runs second meets a
        # warmer (or a more crowded) machine, and that must not count as the hooks' cost
        got = {}
        for hooked in (True, False) if i % 2 == 0 else (False, True):
            if not hooked:
                got[False] = block(steps)
                continue
            installed = hooks.install(sink)
            sink.hooks = installed
            got[True] = block(steps)
            installed.uninstall()
        plain.append(got[False])
        added.append(got[True] - got[False])
    if sink._sampler is not None:
        sink._sampler.stop()
    print(
        json.dumps(
            {
                "step_s": statistics.median(plain),
                "added_s": statistics.median(added),
                "added_q": statistics.quantiles(added, n=4) if len(added) > 1 else added,
                "steps_seen": len(sink.steps),
                "memory_steps": sum(s.memory is not None for s in sink.steps),
            }
        )
    )


if __name__ == "__main__":
    main()
