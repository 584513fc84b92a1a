"""The cost of `mlb attach` per step, paired inside one process (bench section `attach`).

A process-level comparison (the plain script against the script under `mlb attach`, each in its
own process) cannot see 1%: two processes of the same script differ by ±3% on this machine.
Here one process runs the bench script's loop (its model WIDTH wide) and prints one JSON line.

- `hooks ROUNDS PAIRS BATCH WIDTH`: hooked and plain steps alternate step by step (the order
  flipped every other pair), so the machine's drift, which moves a block of steps against the
  next by ±3-5% here, cancels within each pair. A hooked step has the hooks and attach's
  measuring sink installed (its stop rule and memory readings running, the telemetry sampler
  off: it is measured apart), put in before it and taken out after it (`Hooks.resume` /
  `suspend`: the same attributes set either way before either kind of step) over one
  recorder, which so sees every other step: its rules that go by time (the hand-over 0.25 s
  after the oldest logged step, memory read at least once a second) are given twice their
  time, so that they run as often per hooked step as in a run. Each round is the mean
  difference (hooked − plain) over PAIRS pairs (its periodic work, the batched cutting and the
  memory readings, included; the log is cut once, at the end, as in a run: it is not in the
  figure, its cost per step is printed beside it); the figure is the median of the rounds,
  with their quartiles,
  as wall time and as the main thread's CPU time. A warm-up first takes the recorder past
  its first, denser memory readings.
- `telemetry ROUNDS STEPS BATCH WIDTH`: blocks of STEPS steps with the telemetry sampler
  running (started before the block, as attach runs it) against blocks without, no hooks: its
  cost is a share of the wall time (a thread that wakes 10 times a second), the relative
  slowdown of the step's mean (median of the rounds), and beside it the sampler's own CPU time
  per second (`TelemetrySampler.overhead`).

WIDTH 0: the width whose plain step takes ~10 ms on this machine (`sized`), the issue's
reference step, whatever the machine's speed.

Usage: attach_overhead_child.py hooks|telemetry ROUNDS N BATCH WIDTH [KEY=VALUE…]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple


class Block(NamedTuple):
    """n steps of the loop: the median and mean step (data wait included), and the main
    thread's CPU time per step."""

    median: float
    mean: float
    cpu: float


Step = Callable[[], tuple[float, float]]


def loop(batch: int, width: int) -> Step:
    """The bench script's loop (its data, model, optimizer); `step()` runs one step and
    gives its wall time (data wait included) and the main thread's CPU time (the hooks run
    on it: their cost without the time the machine's other work took the core away)."""
    import torch
    from bench_attach import bench_model, endless
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    torch.set_num_threads(1)
    ds = TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
    loader = DataLoader(ds, batch_size=batch, shuffle=True)
    model, opt = bench_model(width)  # bench/ is this script's folder, on sys.path
    batches = endless(loader)
    wall, cpu = time.perf_counter, time.thread_time

    def step() -> tuple[float, float]:
        t0, c0 = wall(), cpu()
        x, y = next(batches)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        return wall() - t0, cpu() - c0

    step.optimizer = opt  # type: ignore[attr-defined]  # (`arms`)
    return step


def arms(installed: Any, optimizer: Any) -> tuple[Callable[[], None], Callable[[], None]]:
    """(hooked, plain): what puts the hooks in before a hooked step and takes them out before
    a plain one (`Hooks.resume` / `suspend`, the same attributes set either way). The
    optimizer was made before the hooks (the loop is built first), so torch wrapped its
    class's `step` then and the hooks fell back to torch's global step hooks; under `mlb
    attach` every optimizer class is first made under the hooks and its `step` is the step
    factory's wrapper instead. That is the path measured: the class's `step` swapped between
    torch's wrapper and the one the hooks' factory makes of the same function, no global
    step hooks."""
    kind = type(optimizer)
    torch_step = kind.__dict__["step"]
    installed.suspend()  # (the global step hooks install() put in: removed)
    installed._global_hooks = False
    installed.resume()
    ours = kind.profile_hook_step(torch_step.__wrapped__)  # the factory, patched: the hooks'
    ours.hooked = True  # (as torch's `_patch_step_function` marks it)

    def hooked() -> None:
        installed.resume()
        kind.step = ours

    def plain() -> None:
        installed.suspend()
        kind.step = torch_step

    plain()
    return hooked, plain


def block(step: Step, n: int) -> Block:
    """n steps: their median and mean, and their CPU time per step."""
    done = [step() for _ in range(n)]
    times = [w for w, _ in done]
    return Block(statistics.median(times), statistics.mean(times), sum(c for _, c in done) / n)


def rounds_of(rounds: int, run: Callable[[bool], Block]) -> tuple[list[Block], list[Block]]:
    """(plain, with) blocks, the two blocks' order flipped round by round: whichever runs
    second meets a warmer (or a more crowded) machine, and that must not count."""
    plain, other = [], []
    for i in range(rounds):
        for on in (True, False) if i % 2 == 0 else (False, True):
            (other if on else plain).append(run(on))
    return plain, other


def _quartiles(values: list[float]) -> dict[str, Any]:
    """The median of the rounds, their quartiles, and the median's 95% confidence interval
    (distribution-free: order statistics, `scipy.stats.quantile_test`)."""
    from scipy.stats import quantile_test

    median = statistics.median(values)
    ci = quantile_test(values, q=median, p=0.5).confidence_interval(0.95)
    return {
        "added_s": median,
        "added_q": statistics.quantiles(values, n=4) if len(values) > 1 else values,
        "added_ci": [float(ci.low), float(ci.high)],
    }


TARGET_S = 0.010  # the reference step


def sized(batch: int) -> tuple[int, float]:
    """The bench model's width whose plain step takes ~TARGET_S here (WIDTH 0): its cost grows
    as w·(266 + w) (three linear layers, 256 → w → w → 10), so each try solves for the width
    from the step measured at the last (the median of 31), four tries at most (within 10%,
    kept). The machine's speed may still move before the rounds: `paired_rows` judges only a
    step measured within 15% of the target."""
    width, step_s = 512, 0.0
    for _ in range(4):
        step = loop(batch, width)
        for _ in range(5):  # warm-up
            step()
        step_s = statistics.median(step()[0] for _ in range(31))
        if abs(step_s / TARGET_S - 1) <= 0.10:
            break
        scale = TARGET_S / step_s * width * (266 + width)  # the cost wanted, in w·(266 + w)
        width = max(32, min(4096, round((-266 + (266**2 + 4 * scale) ** 0.5) / 2 / 16) * 16))
    return width, step_s


# the measuring sink's settings in the benches: a stop rule that never ends inside them (every
# hooked step goes to the sink; at the default 120 s cap the recorder went off mid-bench), the
# telemetry sampler off (measured apart)
NEVER_STOP = (
    "throughput.min_time_s=1000000",
    "throughput.max_steps=100000000",
    "throughput.max_time_s=1000000",
    "throughput.telemetry=false",
)


def measuring_hooks() -> tuple[Any, Any]:
    """(sink, hooks): attach's measuring sink, its rules that go by time given twice their
    time (see the docstring), and the hooks installed with it (imports torch)."""
    from mlbaseline.config import Config, build, parse_set
    from mlbaseline.measure import hooks, step_cutter
    from mlbaseline.runners.attach_child import MeasureSink

    class Sink(MeasureSink):
        memory_gap_s = MeasureSink.memory_gap_s * 2

    step_cutter.HANDOVER_GAP_NS *= 2
    # the bench is one long measuring stretch (~10 boundaries a hooked step, ~13k hooked steps
    # on the narrow model), past a run's MAX_SETTLE_LOG: raised, so that every round is measured
    # as a run's steps are (its log cut once, at the end; a default run's 500 measured steps
    # log ~5k boundaries)
    step_cutter.MAX_SETTLE_LOG = 10**7
    sink = Sink(build(Config, parse_set([*NEVER_STOP, *sys.argv[6:]])), lambda e: None, None, {})
    installed = hooks.install(sink)
    sink.hooks = installed
    return sink, installed


def hooks_cost(step: Step, rounds: int, pairs: int) -> dict[str, Any]:
    from mlbaseline.measure import step_cutter

    sink, installed = measuring_hooks()
    # installed once, then put in and taken out around each hooked step (`arms`: the same
    # attributes set back and forth before either kind of step), one recorder
    put_in, take_out = arms(installed, step.optimizer)  # type: ignore[attr-defined]

    run = int(os.environ.get("BENCH_ATTACH_RUN", "1"))  # steps a side of a pair

    def steps(n: int) -> tuple[float, float]:
        done = [step() for _ in range(n)]
        return statistics.mean(w for w, _ in done), statistics.mean(c for _, c in done)

    def hooked() -> tuple[float, float]:
        put_in()
        return steps(run)

    def plain() -> tuple[float, float]:
        take_out()  # the same attributes set again: a type changed before either step
        return steps(run)

    def pair(i: int) -> tuple[tuple[float, float], tuple[float, float]]:
        if i % 2 == 0:
            return hooked(), plain()
        off = plain()
        return hooked(), off

    for i in range(8 * step_cutter.MEMORY_EVERY + 16):  # warm-up: the dense readings
        pair(i)
    wall, cpu, steps_s = [], [], []
    for _ in range(rounds):
        done = [pair(i) for i in range(pairs)]
        wall.append(statistics.mean(on[0] - off[0] for on, off in done))
        cpu.append(statistics.mean(on[1] - off[1] for on, off in done))
        steps_s.append(statistics.median(off[0] for _, off in done))
    if sink.done:  # the recorder went off: the later rounds measured pass-throughs only
        raise RuntimeError(f"the stop rule ended the bench after {len(sink.steps)} steps")
    # the cut at the end (the stop rule met, in a run): every logged step cut at once
    settled = time.perf_counter()
    installed.rec.flush(block=True)
    settled = time.perf_counter() - settled
    installed.uninstall()
    seen = sink.steps
    return {
        "step_s": statistics.median(steps_s),
        **_quartiles(wall),
        "cpu": _quartiles(cpu),
        "steps_seen": len(seen),
        "memory_steps": sum(s.memory is not None for s in seen),
        "settle_s": settled,
    }


def telemetry_cost(step: Step, rounds: int, steps: int) -> dict[str, Any]:
    from mlbaseline.config import Config, build, parse_set
    from mlbaseline.measure.gpu import default_probe
    from mlbaseline.runners.throughput import make_sampler

    cfg, probe = build(Config, parse_set(sys.argv[6:])), default_probe()

    cpu_ns: list[int] = []
    interval: list[float] = []

    def run(on: bool) -> Block:
        if not on:
            return block(step, steps)
        sampler = make_sampler(probe, cfg)
        sampler.start()
        try:
            return block(step, steps)
        finally:
            sampler.stop()
            # its samples' CPU time but the first's (the start primes psutil's counters)
            cpu_ns.extend(sampler._cpu_ns[1:])
            interval.append(sampler.interval_s)

    block(step, steps)  # warm-up
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
    if width == 0:  # sized to a ~10 ms step on this machine
        width, _ = sized(batch)
    step = loop(batch, width)
    figures = {"hooks": hooks_cost, "telemetry": telemetry_cost}[mode](step, rounds, steps)
    print(json.dumps({**figures, "width": width}))


if __name__ == "__main__":
    main()
