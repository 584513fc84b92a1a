"""The cost of `mlb attach` per step, paired inside one process (bench section `attach`).

A process-level comparison (the plain script against the script under `mlb attach`, each in its
own process) cannot see 1%: two processes of the same script differ by ±3% on this machine. Here
one process alternates blocks of STEPS steps of the bench script's loop (its model WIDTH wide),
ROUNDS times, the order flipped every other round; each round's difference of the two block
medians is one paired difference. Prints one JSON line.

- `hooks`: blocks with the hooks and attach's measuring sink installed (its stop rule and
  memory readings running, the telemetry sampler off: it is measured apart) against blocks with
  them uninstalled: the seconds added per step (median of the rounds), their quartiles. A
  narrow model's short steps show it with the least noise, but ~4x lower than a wide model's
  (~40 against ~110-210 µs here): between a wide model's boundaries its weights push the
  hooks' code and data out of the caches.
- `telemetry`: blocks with the telemetry sampler running (started before the block, as attach
  runs it) against blocks without, no hooks: its cost is a share of the wall time (a thread
  that wakes 10 times a second), the relative slowdown of the step's mean (median of the rounds),
  and beside it the sampler's own CPU time per second (`TelemetrySampler.overhead`).

Usage: attach_overhead_child.py hooks|telemetry ROUNDS STEPS BATCH WIDTH [KEY=VALUE…]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any


def loop(batch: int, width: int) -> Callable[[int, bool], float]:
    """The bench script's loop (its data, model, optimizer); `block(n, mean)` times n steps loop
    top to loop top (data wait included) and gives their median, or their mean."""
    import torch
    from bench_attach import bench_model
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    torch.set_num_threads(1)
    ds = TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
    loader = DataLoader(ds, batch_size=batch, shuffle=True)
    model, opt = bench_model(width)  # bench/ is this script's folder, on sys.path
    batches: Any = iter(loader)

    def block(n: int, mean: bool = False) -> float:
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
        return statistics.mean(times) if mean else statistics.median(times)

    return block


def rounds_of(rounds: int, run: Callable[[bool], float]) -> tuple[list[float], list[float]]:
    """(plain, with) block figures, the two blocks' order flipped round by round: whichever
    runs second meets a warmer (or a more crowded) machine, and that must not count."""
    plain, other = [], []
    for i in range(rounds):
        for on in (True, False) if i % 2 == 0 else (False, True):
            (other if on else plain).append(run(on))
    return plain, other


def hooks_cost(block: Callable[[int, bool], float], rounds: int, steps: int) -> dict[str, Any]:
    from mlbaseline.config import Config, build, parse_set
    from mlbaseline.measure import hooks
    from mlbaseline.runners.attach_child import MeasureSink

    # a stop rule that never ends inside the bench: every hooked step goes to the sink
    never = ["throughput.min_time_s=1000000", "throughput.max_steps=100000000"]
    never += ["throughput.telemetry=false", *sys.argv[6:]]
    sink = MeasureSink(build(Config, parse_set(never)), lambda event: None, None, {})

    def run(on: bool) -> float:
        if not on:
            return block(steps, False)
        installed = hooks.install(sink)
        sink.hooks = installed
        try:
            return block(steps, False)
        finally:
            installed.uninstall()

    block(steps, False)  # warm-up, unhooked
    plain, hooked = rounds_of(rounds, run)
    added = [h - p for h, p in zip(hooked, plain, strict=True)]
    return {
        "step_s": statistics.median(plain),
        "added_s": statistics.median(added),
        "added_q": statistics.quantiles(added, n=4) if len(added) > 1 else added,
        "steps_seen": len(sink.steps),
        "memory_steps": sum(s.memory is not None for s in sink.steps),
    }


def telemetry_cost(block: Callable[[int, bool], float], rounds: int, steps: int) -> dict[str, Any]:
    from mlbaseline.config import Config, build, parse_set
    from mlbaseline.measure.gpu import default_probe
    from mlbaseline.runners.throughput import make_sampler

    cfg, probe = build(Config, parse_set(sys.argv[6:])), default_probe()

    cpu_ns: list[int] = []
    interval: list[float] = []

    def run(on: bool) -> float:
        if not on:
            return block(steps, True)
        sampler = make_sampler(probe, cfg)
        sampler.start()
        try:
            return block(steps, True)
        finally:
            sampler.stop()
            # its samples' CPU time but the first's (the start primes psutil's counters)
            cpu_ns.extend(sampler._cpu_ns[1:])
            interval.append(sampler.interval_s)

    block(steps, True)  # warm-up
    plain, sampled = rounds_of(rounds, run)
    share = [s / p - 1 for s, p in zip(sampled, plain, strict=True)]
    return {
        "step_s": statistics.median(plain),
        "share": statistics.median(share),
        "share_q": statistics.quantiles(share, n=4) if len(share) > 1 else share,
        # its own CPU time a sample x its rate: the share of one core it takes
        "cpu_share": statistics.mean(cpu_ns) / 1e9 / interval[0] if cpu_ns else float("nan"),
    }


def main() -> None:
    mode = sys.argv[1]
    rounds, steps, batch, width = (int(a) for a in sys.argv[2:6])
    block = loop(batch, width)
    figures = {"hooks": hooks_cost, "telemetry": telemetry_cost}[mode](block, rounds, steps)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
