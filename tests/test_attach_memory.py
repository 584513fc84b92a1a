"""`mlb attach`'s memory (issue 28) and its default replicates (issue 26): the cutter reading
the per-step memory recorder on a fake clock, the measuring sink's memory metrics, which process
`--then continue` lets train on, and two real default-path runs (a script and the same script
~3x slower) that `mlb compare` must call regressed."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlbaseline.config import resolve
from mlbaseline.measure.clock import ManualClock
from mlbaseline.measure.hooks import CpuMarker, HookStep, Recorder
from mlbaseline.measure.memory_step import StepMemory, median_memory
from mlbaseline.measure.step_cutter import MEMORY_DENSE, MEMORY_EVERY, MEMORY_GAP_S, STAGES
from mlbaseline.measure.timers import StepTimes
from mlbaseline.results import load_result
from mlbaseline.runners import attach, attach_child


class FakeMemory:
    """A step memory recorder whose counter the test moves; each reading costs `cost_s` on
    the clock (so where that cost lands can be checked)."""

    kind, peak_kind = "fake", "fake_peak"

    def __init__(self, clock: ManualClock, cost_s: float = 0.0) -> None:
        self.clock, self.cost_s = clock, cost_s
        self.now = 1000
        self.peak = 0
        self.begun = 0

    def begin_step(self) -> None:
        self.begun += 1
        self.peak = self.now

    def current(self) -> int:
        self.clock.advance(self.cost_s)
        return self.now

    def stage_end(self, name: str, start: int) -> None:  # the stage timer's; unused here
        raise AssertionError("the cutter keeps its own held bytes")

    def end_step(self) -> StepMemory:
        return StepMemory({}, self.peak, None, self.kind, self.peak_kind)

    def alloc(self, nbytes: int) -> None:
        self.now += nbytes
        self.peak = max(self.peak, self.now)


class Sink:
    def __init__(self) -> None:
        self.steps: list[HookStep] = []

    def on_step(self, record: HookStep) -> None:
        self.steps.append(record)


class Loop:
    """Boundary events on a manual clock, memory moved inside the intervals."""

    def __init__(self, cost_s: float = 0.0, memory: bool = True, sink: Sink | None = None) -> None:
        self.clock = ManualClock()
        self.mem = FakeMemory(self.clock, cost_s)
        self.sink = sink or Sink()
        memory_for = (lambda kind: self.mem) if memory else None
        self.rec = Recorder(self.sink, CpuMarker(self.clock), memory_for)
        self.rec.optimizer_created()

    def span(self, kind: str, s: float, alloc: int = 0) -> None:
        self.rec.begin(kind, 8 if kind == "fwd" else None)
        self.clock.advance(s)
        self.mem.alloc(alloc)
        if kind == "opt":
            self.rec.opt_post()
        else:
            self.rec.end()

    def step(self, activations: int = 4096) -> None:
        """zero_grad (frees the grads), data, forward (keeps the activations), the loss (a
        scalar's bytes), backward (frees the activations, makes grads), optimizer."""
        self.span("aux", 0.0002, alloc=-512)
        self.span("data", 0.002)
        self.span("fwd", 0.003, alloc=activations)
        self.clock.advance(0.001)
        self.mem.alloc(64)  # the loss, between forward and backward
        self.span("bwd", 0.004, alloc=512 - activations - 64)
        self.clock.advance(0.0005)
        self.span("opt", 0.002, alloc=2048)
        self.mem.alloc(-2048)  # the optimizer's scratch, freed after its step


def test_each_stage_holds_what_it_allocated_and_the_step_its_peak() -> None:
    loop = Loop()
    for _ in range(6):
        loop.step(activations=4096)
    loop.rec.flush(block=True)
    steps = loop.sink.steps
    assert len(steps) >= 4
    read = [step for step in steps[1:] if step.memory is not None]
    assert read  # the first steps are read (then one in MEMORY_EVERY, or every MEMORY_GAP_S)
    for step in read:
        memory = step.memory
        assert memory is not None
        assert memory.held["forward"] == 4096  # the activations
        assert memory.held["loss"] == 64
        assert memory.held["backward"] == 0  # it freed more than it made
        assert memory.held["optimizer"] == 2048  # the update's scratch, held at its end
        assert memory.held["data_wait"] == 0
        assert set(memory.held) == set(STAGES)
        assert memory.kind == "fake" and memory.peak_kind == "fake_peak"
        # the recorder's step runs from one close (the next data draw) to the next: from
        # 488 (1000 less the grads the first zero_grad freed), its peak the activations and
        # the loss together
        assert memory.peak == 488 + 4096 + 64
    # one recorder step per read step: begun at the first boundary and at each read one's start
    assert loop.mem.begun >= len(read) + 1


@pytest.mark.parametrize(("step_s", "every"), [(0.001, MEMORY_EVERY), (MEMORY_GAP_S + 0.01, 1)])
def test_memory_is_read_on_one_step_in_several_unless_steps_are_slow(
    step_s: float, every: int
) -> None:
    """On the host clock each reading costs ~5 µs with the step's data in the cache, ~100 µs a
    step: a fast step is read once in MEMORY_EVERY, a step slower than MEMORY_GAP_S every time;
    a read step after unread ones still holds its own stages' bytes (not the unread ones')."""
    loop = Loop()
    gaps = _read_gaps(loop, 4 * MEMORY_EVERY + 1, step_s)
    assert set(gaps) == {every}
    for step in loop.sink.steps:
        if step.memory is not None:
            assert step.memory.held["forward"] == 4096 and step.memory.held["optimizer"] == 16
            assert step.memory.held["backward"] == 0


def _read_gaps(loop: Loop, steps: int, step_s: float) -> list[int]:
    """Run `steps` steps of `step_s` seconds: the gaps (in steps) between read steps."""
    for _ in range(steps):
        loop.span("aux", 0.0)
        loop.span("data", step_s / 4)
        loop.span("fwd", step_s / 4, alloc=4096)
        loop.span("bwd", step_s / 4, alloc=-4096)
        loop.span("opt", step_s / 4, alloc=16)
    loop.rec.flush(block=True)
    flags = [step.memory is not None for step in loop.sink.steps][1:]  # the first: both read
    return [b - a for a, b in itertools.pairwise(i for i, f in enumerate(flags) if f)]


class SparseSink(Sink):
    handover_every = 16
    memory_every = 64
    memory_gap_s = 1.0


@pytest.mark.parametrize(("step_s", "every"), [(0.001, 64), (0.05, 20), (1.1, 1)])
def test_a_sink_may_read_memory_less_often_after_the_first_readings(
    step_s: float, every: int
) -> None:
    """The measuring sink's cadence (a read step costs ~350 µs on a cold cache): the first
    MEMORY_DENSE readings as usual (a short run has its memory), then one step in 64 or once
    a second, whichever comes first."""
    loop = Loop(sink=SparseSink())
    gaps = _read_gaps(loop, 8 * MEMORY_EVERY + 3 * 64 + 1, step_s)
    dense = min(MEMORY_EVERY, max(1, round(MEMORY_GAP_S / step_s + 0.5)))
    assert gaps[: MEMORY_DENSE - 2] == [dense] * (MEMORY_DENSE - 2)
    assert gaps[MEMORY_DENSE:] and set(gaps[MEMORY_DENSE:]) == {every}


def test_the_readings_cost_is_cut_out_of_the_step() -> None:
    """A reading's time is mlb's cost: in no stage, not in the residual (it was 3-10% of a small
    script's step there), so the step is the script's own work with or without memory."""
    plain, measured = Loop(memory=False), Loop(cost_s=0.0001)
    for loop in (plain, measured):
        for _ in range(5):
            loop.step()
        loop.rec.flush(block=True)
    last = max(i for i, step in enumerate(measured.sink.steps) if step.memory is not None)
    assert last >= 1  # a step after the first (that one is warm-up)
    a, b = plain.sink.steps[last], measured.sink.steps[last]
    assert a.memory is None and b.memory is not None
    for stage in STAGES:
        assert b.stages[stage] == pytest.approx(a.stages[stage], abs=1e-12)
    # every reading (one per boundary, the peak's at the close) is cut out of the step
    assert b.residual_s == pytest.approx(a.residual_s, abs=1e-12)
    assert b.total_s == pytest.approx(a.total_s, abs=1e-12)
    assert b.total_s == pytest.approx(sum(b.stages.values()) + b.residual_s)


def test_an_h2d_that_moved_nothing_gives_its_time_to_the_stage_it_interrupted() -> None:
    loop = Loop(cost_s=0.0001)
    loop.span("fwd", 0.003)
    loop.clock.advance(0.001)  # the loss
    loop.span("h2d", 0.001)
    loop.rec.begin("h2d")
    loop.clock.advance(0.001)
    loop.rec.end(keep=False)  # moved nothing: the time is the loss's, as the gap before it
    segs = loop.rec._step.segs
    assert [g.label for g in segs][-3:] == ["h2d", "loss", "loss"]
    assert all(g.c is not None for g in segs)  # each reading's time: the segment's tail


def test_a_switch_to_the_gpu_clock_takes_the_gpu_recorder() -> None:
    kinds: list[str] = []
    clock = ManualClock()

    def memory_for(kind: str) -> FakeMemory:
        kinds.append(kind)
        return FakeMemory(clock)

    class GpuMarker(CpuMarker):
        kind = "cuda"

    rec = Recorder(Sink(), CpuMarker(clock), memory_for)
    rec.switch_marker(GpuMarker(clock))
    assert kinds == ["cpu", "cuda"]
    rec.switch_marker(None)
    assert kinds == ["cpu", "cuda"]


def _fast_cfg(tmp_path: Path) -> Any:
    (tmp_path / "fast.yaml").write_text(FAST)
    return resolve(tmp_path / "fast.yaml")


def test_the_measuring_sink_turns_step_memory_into_mem_metrics(tmp_path: Path) -> None:
    cfg = _fast_cfg(tmp_path)
    sink = attach_child.MeasureSink(cfg, lambda e: None, tmp_path / "r.json", {})
    stages = dict.fromkeys(STAGES, 0.001)
    for i in range(200):
        held = {**dict.fromkeys(STAGES, 0), "forward": 8 * 2**20 + i % 3}
        memory = StepMemory(held, 300 * 2**20, None, "cpu_malloc", "cpu_rss_hwm")
        sink.on_step(HookStep(0.01, dict(stages), 0.0, 1, 8, "optimizer", 8, memory))
        if sink.done:
            break
    result = load_result(tmp_path / "r.json", ["throughput"])
    forward = result.measurements["train.bs8.mem.forward"]
    assert forward.unit == "B" and not forward.higher_is_better
    assert forward.meta["role"] == "memory" and forward.meta["stage"] == "forward"
    assert forward.meta["group"] == "train.bs8" and forward.meta["memory"] == "held"
    assert all(8 * 2**20 <= v <= 8 * 2**20 + 2 for v in forward.values)
    peak = result.measurements["train.bs8.mem.peak"]
    assert set(peak.values) == {300 * 2**20} and peak.meta["memory"] == "peak"
    assert len(peak.values) == len(result.measurements["train.bs8.step"].values)


def test_only_the_last_process_trains_on() -> None:
    fixed = [attach._Last(r, 3, None, [], [], 0.0) for r in range(3)]
    assert [last(None) for last in fixed] == [False, False, True]  # type: ignore[arg-type]


def test_under_auto_the_process_the_plan_stops_after_trains_on(tmp_path: Path) -> None:
    from mlbaseline.runners.replicate_plan import Plan

    cfg = _fast_cfg(tmp_path)
    results = []
    for i, total in enumerate((0.010, 0.0101, 0.0099)):
        sink = attach_child.MeasureSink(cfg, lambda e: None, tmp_path / f"r{i}.json", {})
        stages = dict.fromkeys(STAGES, 0.001)
        for _ in range(200):
            sink.on_step(HookStep(total, dict(stages), 0.0, 1, 8, "optimizer", 8))
            if sink.done:
                break
        results.append(load_result(tmp_path / f"r{i}.json", ["throughput"]))
    plan = Plan(min_k=3, max_k=10, target=0.05, budget_s=1000.0)
    done = [attach.ChildOutcome(r, "stopped", -2) for r in results[:2]]
    now = time.perf_counter()
    second = attach._Last(1, 10, plan, done[:1], [1.0], now)
    assert not second(results[1]) and second.decided and second.block is None
    third = attach._Last(2, 10, plan, done, [1.0, 1.0], now)
    assert third(results[2]) and third.block is not None and third.block["stop"] == "target"
    assert third.block["replicates"] == 3


# ---------------------------------------------------------------- real runs (the default path)

FAST = """\
throughput:
  min_time_s: 0
  min_steps: 24  # memory is read on one step in MEMORY_EVERY (16): at least one here
  window: 4
  stability_windows: 2
  stability_tolerance: 0.5
  warmup_min: 2
  warmup_max: 10
  max_time_s: 30
  max_repeats: 3
  telemetry: false
"""
HELD = 2**18  # floats the forward keeps for the backward: 1 MiB (its ops well under the spin)
SCRIPT = f'''\
"""A tiny loop whose forward keeps {HELD} floats alive until the backward, and spins
argv[1] seconds."""
import sys
import time

import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)
SPIN = float(sys.argv[1])


class Keep(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 2)
        self.w = nn.Parameter(torch.zeros({HELD}))

    def forward(self, x):
        end = time.perf_counter() + SPIN
        while time.perf_counter() < end:
            pass
        t = torch.ones({HELD})  # saved by the product for the backward: held until then
        return self.lin(x) + (self.w * t).sum()


model = Keep()
optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
x = torch.randn(4, 8)
for _ in range(100000):
    optimizer.zero_grad()
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
'''


def _mlb(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    (cwd / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "MLB_HISTORY": str(cwd / "h.sqlite"), "TMPDIR": str(cwd / "tmp")}
    return subprocess.run(
        [sys.executable, "-m", "mlbaseline", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def default_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two `mlb attach` runs with the default repeats (auto; max_repeats 3 keeps it short):
    the script at a 3 ms forward spin, and at 10 ms (its step ~3x slower: the spin is on the
    wall clock, so the other programs' load stretches neither)."""
    folder = tmp_path_factory.mktemp("attach_default")
    (folder / "fast.yaml").write_text(FAST)
    (folder / "keep.py").write_text(SCRIPT)
    for name, spin in (("a", "0.003"), ("b", "0.010")):
        cmd = ["attach", "-c", "fast.yaml", "-o", f"{name}.json", "--no-history"]
        run = _mlb(folder, *cmd, "--", sys.executable, "keep.py", spin)
        assert run.returncode == 0, run.stderr
    return folder


def test_attach_measures_the_activations_the_forward_keeps(default_runs: Path) -> None:
    for name in ("a", "b"):
        result = load_result(default_runs / f"{name}.json", ["throughput"])
        forward = result.measurements["train.bs4.mem.forward"]
        assert forward.unit == "B" and forward.meta["memory"] == "held"
        assert float(np.median(forward.values)) == pytest.approx(HELD * 4, rel=0.05)
        peak = result.measurements["train.bs4.mem.peak"]
        assert min(peak.values) > HELD * 4  # the process's peak holds the activations
        # memory is read on one step in several (MEMORY_EVERY), the steps' times on all
        assert 0 < len(peak.values) <= len(result.measurements["train.bs4.step"].values)


def test_two_default_attach_results_compare_to_a_verdict(default_runs: Path) -> None:
    a = load_result(default_runs / "a.json", ["throughput"])
    assert a.data["repeats"] == "auto"  # the default: pooled fresh processes
    assert set(a.measurements["train.bs4.step"].replicate or []) == {0, 1, 2}
    assert a.data["attach"]["then"] == "stop"
    run = _mlb(default_runs, "compare", "a.json", "b.json", "--no-history", "-o", "cmp.json")
    assert run.returncode == 1, run.stderr  # --fail-on regressed, the default
    doc = json.loads((default_runs / "cmp.json").read_text())
    assert _verdict(doc, "train.bs4.step") == "regressed", run.stderr


def _verdict(doc: Any, metric: str) -> str | None:
    """The verdict of `metric` wherever the comparison result keeps it."""
    if isinstance(doc, dict):
        if doc.get("metric") == metric and "verdict" in doc:
            return str(doc["verdict"])
        entry = doc.get(metric)
        if isinstance(entry, dict) and "verdict" in entry:
            return str(entry["verdict"])
        items = doc.values()
    elif isinstance(doc, list):
        items = doc
    else:
        return None
    for item in items:
        found = _verdict(item, metric)
        if found is not None:
            return found
    return None


# ---------------------------------------------------------------- mlb ab --attach (turn mode)


def test_a_turns_steps_carry_their_memory_and_the_turn_its_medians() -> None:
    from mlbaseline.runners.attach_turns import step_entry, turn_memory

    stages = dict.fromkeys(STAGES, 0.001)
    steps = []
    for i in range(5):
        held = {**dict.fromkeys(STAGES, 0), "forward": 1000 + i}
        memory = StepMemory(held, 5000 + i, None, "cpu_malloc", "cpu_rss_hwm")
        steps.append(step_entry(HookStep(0.01, dict(stages), 0.0, 1, 8, "optimizer", 8, memory)))
    first = steps[0]["mem"]
    assert (first["peak"], first["reserved"], first["held"]["forward"]) == (5000, None, 1000)
    assert set(first["held"]) == set(STAGES)
    json.dumps(steps)  # the status line is JSON
    memory = turn_memory(steps)
    assert memory is not None
    assert (memory.peak, memory.held["forward"], memory.reserved) == (5002, 1002, None)
    unread = step_entry(HookStep(0.01, dict(stages)))  # a step whose memory was not read
    assert turn_memory([*steps, unread]) == memory  # over the read steps only
    assert turn_memory([unread, unread]) is None


class MemChild:
    """An arm process for the turn loop: a turn of 5 steps, its forward holding `held` bytes."""

    def __init__(self, held: int) -> None:
        self.held = held
        self.pending: list[dict[str, Any]] = [{"event": "measuring"}]

    def send(self, command: dict[str, Any]) -> None:
        if command["cmd"] == "go":
            steps = []
            for i in range(5):
                held = {**dict.fromkeys(STAGES, 0), "forward": self.held}
                mem = {"peak": 10 * 2**20 + self.held, "reserved": None, "held": held}
                stages = {**dict.fromkeys(STAGES, 0.001), "forward": 0.004 + i * 1e-5}
                steps.append({"step": 0.01 + i * 1e-5, "stages": stages, "samples": 8, "mem": mem})
            self.pending.append({"event": "turn", "steps": steps})

    def event(self, timeout_s: float) -> dict[str, Any] | None:
        return self.pending.pop(0)

    def end(self) -> str:
        return "exit code 0"

    def pin(self) -> None:
        pass  # no --cpus here


def test_ab_attach_judges_the_arms_memory_by_the_memory_rule(tmp_path: Path) -> None:
    from mlbaseline.runners.attach_ab import ScriptArm, run_ab_attach

    arm = ScriptArm(("python", "train.py"), tmp_path)

    def spawn(spec: ScriptArm, name: str) -> MemChild:
        return MemChild(2 * 2**20 if name.startswith("b") else 2**20)  # B doubles the activations

    result = run_ab_attach(resolve(None, "demo"), arm, arm, spawn, pairs=6, seed=1)
    assert result.measurements["ab.b.mem.forward"].values[0] == 2 * 2**20
    memory = result.data["memory"]
    assert memory["verdict"] == "regressed" and memory["named"] == "forward"
    rows = {r["metric"]: r["verdict"] for r in memory["metrics"]}
    assert rows["mem.forward"] == "regressed" and rows["mem.backward"] == "unchanged"
    assert any(c.name == "ab.mem.forward" and c.status == "fail" for c in result.verdict.checks)


# ---------------------------------------------------------------- CUDA (make gpu-check)


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA device")
def test_on_cuda_the_forward_holds_its_activations_in_the_allocators_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from mlbaseline.measure import hooks

    n = 2**20  # floats saved for the backward: 4 MiB of device memory

    class Keep(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 2)
            self.w = torch.nn.Parameter(torch.zeros(n))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            t = torch.ones(n, device=x.device)
            return self.lin(x) + (self.w * t).sum()

    model = Keep().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x = torch.randn(4, 8)
    sink = Sink()
    installed = hooks.install(sink)
    syncs: list[int] = []
    real_sync = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: syncs.append(1) or real_sync(*a))
    try:
        for _ in range(20):
            opt.zero_grad()
            model(x.cuda()).square().mean().backward()
            opt.step()
        assert syncs == []  # the memory readings did not wait for the device
        installed.rec.flush(block=True)
    finally:
        installed.uninstall()
    measured = [s.memory for s in sink.steps[2:]]
    assert measured and all(m is not None and m.kind == "cuda_allocated" for m in measured)
    forward = float(np.median([m.held["forward"] for m in measured if m is not None]))
    assert forward == pytest.approx(n * 4, rel=0.05)
    assert all(m is not None and m.reserved is not None and m.peak >= n * 4 for m in measured)


class _Workers:
    """The hooks' side the sink reads at its end: the script's DataLoader workers."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.rec = Recorder(Sink(), CpuMarker(ManualClock()))

    def worker_pids(self) -> list[int]:
        return self.pids


def test_the_sink_reads_the_loader_workers_peak_at_its_end(tmp_path: Path) -> None:
    """`mem.workers_peak` for an attached script: its DataLoader workers' VmHWM summed when the
    stop rule is met (here this test's own process stands in for one worker)."""
    cfg = _fast_cfg(tmp_path)
    sink = attach_child.MeasureSink(cfg, lambda e: None, tmp_path / "r.json", {})
    sink.hooks = _Workers([os.getpid()])  # type: ignore[assignment]
    stages = dict.fromkeys(STAGES, 0.001)
    for _ in range(200):
        sink.on_step(HookStep(0.01, dict(stages), 0.0, 1, 8, "optimizer", 8))
        if sink.done:
            break
    result = load_result(tmp_path / "r.json", ["throughput"])
    peak = result.measurements["train.bs8.mem.workers_peak"]
    assert peak.values[0] > 0 and peak.meta["memory"] == "workers_peak"


def test_the_hooks_know_the_scripts_loader_workers() -> None:
    import torch

    from mlbaseline.measure import hooks
    from mlbaseline.measure.memory import workers_peak

    h = hooks.install(Sink())
    try:
        data = torch.utils.data.TensorDataset(torch.randn(16, 4))
        loader = torch.utils.data.DataLoader(data, batch_size=4, num_workers=1)
        it = iter(loader)
        next(it)
        pids = h.worker_pids()
        assert len(pids) == 1 and pids[0] != os.getpid()
        assert (workers_peak(pids) or 0) > 0
        del it
    finally:
        h.uninstall()


def test_the_median_of_memory_records_is_taken_figure_by_figure() -> None:
    """One rule for a turn's steps and a unit's turns: a stage a record lacks counts 0, the
    peak is over the records that have one, the pool only where every record has it."""
    from mlbaseline.runners.attach_turns import turn_memory
    from mlbaseline.runners.attach_units import pooled_times

    mems = [
        StepMemory({"forward": 100, "backward": 10}, 1000, 4096, "malloc", "hwm"),
        StepMemory({"forward": 300}, 3000, 4096),
        StepMemory({"forward": 200, "backward": 30}, 2000, 8192),
    ]
    got = median_memory(mems)
    assert got == StepMemory({"backward": 10, "forward": 200}, 2000, 4096, "malloc", "hwm")
    assert median_memory([*mems, StepMemory({}, None, None)]).reserved is None
    assert median_memory([StepMemory({}, None, 1)]).peak is None
    with pytest.raises(ValueError):
        median_memory([])
    steps = [{"mem": {"held": m.held, "peak": m.peak, "reserved": m.reserved}} for m in mems]
    assert turn_memory([*steps, {"mem": None}]) == StepMemory(got.held, 2000, 4096)
    assert turn_memory([{"mem": None}]) is None
    times = [StepTimes(total_s=0.01 * (i + 1), stages={}, memory=m) for i, m in enumerate(mems)]
    assert pooled_times(times).memory == got
    unread = [*times, StepTimes(total_s=0.01, stages={}, memory=None)]
    assert pooled_times(unread).memory is None  # a turn whose memory was not read: none
