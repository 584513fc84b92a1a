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
from typing import Any, NamedTuple


class Block(NamedTuple):
    """n steps of the loop: the median and mean step (loop top to loop top, data wait
    included), and the main thread's CPU time per step (the hooks run on it: their CPU cost
    without the time the machine's other work took the core away)."""

    median: float
    mean: float
    cpu: float


def loop(batch: int, width: int) -> Callable[[int], Block]:
    """The bench script's loop (its data, model, optimizer); `block(n)` runs n steps."""
    import torch
    from bench_attach import bench_model
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    torch.set_num_threads(1)
    ds = TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
    loader = DataLoader(ds, batch_size=batch, shuffle=True)
    model, opt = bench_model(width)  # bench/ is this script's folder, on sys.path
    batches: Any = iter(loader)

    def block(n: int) -> Block:
        nonlocal batches
        times, last, cpu = [], None, [0.0, 0.0]
        for i in range(n):
            try:
                x, y = next(batches)
            except StopIteration:
                batches = iter(loader)
                x, y = next(batches)
            now = time.perf_counter()
            if last is not None:
                times.append(now - last)
            if last is None or i == n - 1:  # CPU time over the same steps as the times
                cpu[last is not None] = time.thread_time()
            last = now
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        per_step = (cpu[1] - cpu[0]) / len(times)
        return Block(statistics.median(times), statistics.mean(times), per_step)

    return block


def rounds_of(rounds: int, run: Callable[[bool], Block]) -> tuple[list[Block], list[Block]]:
    """(plain, with) blocks, the two blocks' order flipped round by round: whichever runs
    second meets a warmer (or a more crowded) machine, and that must not count."""
    plain, other = [], []
    for i in range(rounds):
        for on in (True, False) if i % 2 == 0 else (False, True):
            (other if on else plain).append(run(on))
    return plain, other


def paired(plain: list[Block], other: list[Block], figure: str) -> dict[str, Any]:
    """A figure's difference (with − plain) round by round: its median and quartiles."""
    diff = [getattr(o, figure) - getattr(p, figure) for o, p in zip(other, plain, strict=True)]
    quartiles = statistics.quantiles(diff, n=4) if len(diff) > 1 else diff
    return {"added_s": statistics.median(diff), "added_q": quartiles}


def hooks_cost(block: Callable[[int], Block], rounds: int, steps: int) -> dict[str, Any]:
    from mlbaseline.config import Config, build, parse_set
    from mlbaseline.measure import hooks
    from mlbaseline.runners.attach_child import MeasureSink

    # a stop rule that never ends inside the bench: every hooked step goes to the sink
    never = ["throughput.min_time_s=1000000", "throughput.max_steps=100000000"]
    never += ["throughput.telemetry=false", *sys.argv[6:]]
    sink = MeasureSink(build(Config, parse_set(never)), lambda event: None, None, {})

    def run(on: bool) -> Block:
        if not on:
            return block(steps)
        installed = hooks.install(sink)
        sink.hooks = installed
        try:
            return block(steps)
        finally:
            installed.uninstall()

    block(steps)  # warm-up, unhooked
    plain, hooked = rounds_of(rounds, run)
    # the mean step: the cost of every step, the one whose end cuts the logged steps (1 in 16)
    # included, which a median of the steps would leave out
    return {
        "step_s": statistics.median(b.mean for b in plain),
        **paired(plain, hooked, "mean"),
        "cpu": paired(plain, hooked, "cpu"),
        "median_step": paired(plain, hooked, "median"),
        "steps_seen": len(sink.steps),
        "memory_steps": sum(s.memory is not None for s in sink.steps),
    }


def telemetry_cost(block: Callable[[int], Block], rounds: int, steps: int) -> dict[str, Any]:
    from mlbaseline.config import Config, build, parse_set
    from mlbaseline.measure.gpu import default_probe
    from mlbaseline.runners.throughput import make_sampler

    cfg, probe = build(Config, parse_set(sys.argv[6:])), default_probe()

    cpu_ns: list[int] = []
    interval: list[float] = []

    def run(on: bool) -> Block:
        if not on:
            return block(steps)
        sampler = make_sampler(probe, cfg)
        sampler.start()
        try:
            return block(steps)
        finally:
            sampler.stop()
            # its samples' CPU time but the first's (the start primes psutil's counters)
            cpu_ns.extend(sampler._cpu_ns[1:])
            interval.append(sampler.interval_s)

    block(steps)  # warm-up
    plain, sampled = rounds_of(rounds, run)
    share = [s.mean / p.mean - 1 for s, p in zip(sampled, plain, strict=True)]
    return {
        "step_s": statistics.median(b.mean for b in plain),
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
