"""Energy per step and per sample (measure/energy.py): a fake NVML counter, a synthetic power
curve through the real telemetry sampler, a fake powercap tree; fake clocks, no sleeps."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlbaseline.measure import energy
from mlbaseline.measure.clock import ManualClock
from mlbaseline.measure.energy import (
    MIN_WINDOW_S,
    UPDATE_PERIOD_S,
    EnergyMeter,
    Mark,
    NvmlCounter,
    PowerPolling,
    integrate_power,
    measure_window,
    nvml_index,
    open_rapl,
    open_source,
    pooled_block,
    split_windows,
)
from mlbaseline.measure.gpu import GpuInfo, GpuSample, NullProbe
from mlbaseline.measure.telemetry import TelemetrySampler

ROOT = Path(__file__).resolve().parents[1]


class EnergyProbe:
    """One GPU drawing `watts` (a function of the clock's seconds); its total-energy counter
    advances in steps of `update_s` (NVML's coarse update), or is absent (`counter=False`)."""

    def __init__(self, clock: ManualClock, watts=lambda t: 250.0, update_s=0.0, counter=True):
        self.clock, self.watts, self.update_s, self.counter = clock, watts, update_s, counter

    def available(self):
        return True, ""

    def driver_version(self):
        return "550.1"

    def devices(self):
        return [GpuInfo(0, "Fake GPU", "GPU-aaaa", 16 << 30, 1 << 30, 40.0)]

    def _t(self) -> float:
        return self.clock.now_ns() / 1e9

    def sample(self, index: int) -> GpuSample:
        return GpuSample(index, 90.0, 2 << 30, 50.0, self.watts(self._t()), 1400.0)

    def total_energy_mj(self, index: int) -> int | None:
        if not self.counter:
            return None
        t = self._t()
        if self.update_s:
            t = math.floor(t / self.update_s) * self.update_s  # the last driver update
        return round(self.watts(0.0) * t * 1000)  # constant power: mJ = W × s × 1000

    def close(self):
        pass


def _steps(meter: EnergyMeter, clock: ManualClock, n: int, step_s: float) -> None:
    for i in range(1, n + 1):
        clock.advance(step_s)
        meter.mark(i)


# ---------------------------------------------------------------- NVML counter


def test_energy_per_step_from_counter_differences():
    clock = ManualClock()
    probe = EnergyProbe(clock, watts=lambda t: 300.0)
    source, why = open_source("cuda", probe, clock=clock, cuda_visible=None)
    assert why == "" and isinstance(source, NvmlCounter)
    meter = EnergyMeter(source)
    meter.begin()
    _steps(meter, clock, 210, 0.02)  # 10 warm-up steps, then 200 steps = 4 s
    metrics = meter.end("train.bs8", 8, warmup=10, samples=[8] * 210)
    per_step, per_sample = metrics
    assert per_step.name == "train.bs8.energy_per_step" and per_step.unit == "J"
    assert per_step.higher_is_better is False
    assert per_step.meta["role"] == "energy" and per_step.meta["group"] == "train.bs8"
    assert per_step.meta["source"] == "nvml-counter" and per_step.meta["window_s"] >= MIN_WINDOW_S
    assert len(per_step.values) == 4  # four windows of >= 1 s
    assert per_step.values == pytest.approx([300.0 * 0.02] * 4)  # 6 J per 20 ms step at 300 W
    assert per_sample.values == pytest.approx([6.0 / 8] * 4)
    block = meter.block()
    assert block["measured"] is True and block["source"] == "nvml-counter"
    windows = block["batch_sizes"]["8"]["windows"]
    assert sum(w["steps"] for w in windows) == 200 and all(w["flag"] == "" for w in windows)


def test_coarse_counter_updates_keep_the_total_over_one_second_windows():
    clock = ManualClock()
    probe = EnergyProbe(clock, watts=lambda t: 200.0, update_s=UPDATE_PERIOD_S)
    source, _ = open_source("cuda:0", probe, clock=clock, cuda_visible=None)
    meter = EnergyMeter(source)
    meter.begin()
    _steps(meter, clock, 500, 0.013)
    (per_step, _) = meter.end("train.bs4", 4, warmup=0, samples=[4] * 500)
    # each window is off by at most one counter update at each edge: 2 × 0.1 s over >= 1 s
    for v in per_step.values:
        assert v == pytest.approx(200.0 * 0.013, rel=0.2)
    total = sum(v * 1 for v in per_step.values)
    assert total > 0


def test_short_window_is_flagged_never_zero_joules():
    clock = ManualClock()
    probe = EnergyProbe(clock, update_s=UPDATE_PERIOD_S)
    source = NvmlCounter(probe, 0, clock)
    a = Mark(0, 0.0, source.read_j())
    clock.advance(0.05)  # shorter than the counter's update period: it has not moved
    b = Mark(3, 0.05, source.read_j())
    w = measure_window(source, a, b, samples=24)
    assert w.flag == "short_window" and w.joules is None
    # a whole measured phase under the update period: no figure, the reason says so
    meter = EnergyMeter(source)
    meter.begin()
    _steps(meter, clock, 5, 0.012)
    assert meter.end("train.bs8", 8, warmup=1, samples=[8] * 5) == []
    entry = meter.block()["batch_sizes"]["8"]
    assert entry["windows"][0]["flag"] == "short_window"
    assert entry["windows"][0]["joules"] is None and "short_window" in entry["reason"]


def test_a_counter_that_did_not_move_is_flagged_and_half_a_second_is_no_figure():
    clock = ManualClock()
    probe = EnergyProbe(clock, watts=lambda t: 0.0)
    source = NvmlCounter(probe, 0, clock)
    a = Mark(0, 0.0, source.read_j())
    clock.advance(2.0)
    assert measure_window(source, a, Mark(10, 2.0, source.read_j()), 80).flag == "no_update"
    probe.watts = lambda t: 100.0
    b = Mark(5, 2.5, source.read_j())
    clock.advance(0.5)
    w = measure_window(source, b, Mark(10, 3.0, source.read_j()), 40)
    assert w.flag == "below_min_window" and w.joules == pytest.approx(50.0)


def test_windows_close_at_one_second_and_a_short_tail_joins_the_last():
    marks = [Mark(i, i * 0.3, None) for i in range(12)]  # 3.3 s of marks
    pairs = split_windows(marks, first_step=2, min_s=1.0)
    assert [(a.steps, b.steps) for a, b in pairs] == [(2, 6), (6, 11)]
    assert all(b.t_s - a.t_s >= 1.0 for a, b in pairs)
    assert split_windows(marks[:2], 0, 1.0) == [(marks[0], marks[1])]
    assert split_windows(marks[:1], 0, 1.0) == []


def test_counter_absent_falls_back_to_power_polling_else_says_why():
    clock = ManualClock()
    probe = EnergyProbe(clock, counter=False)
    sampler = TelemetrySampler(probe, 0.1, clock=clock)
    source, _ = open_source("cuda", probe, sampler, clock=clock, cuda_visible=None)
    assert isinstance(source, PowerPolling)
    source, why = open_source("cuda", probe, None, clock=clock, cuda_visible=None)
    assert source is None and "no NVML energy counter" in why and "telemetry is off" in why
    source, why = open_source("cuda", NullProbe("no driver"), None, cuda_visible=None)
    assert source is None and why == "no NVML: no driver"
    source, why = open_source("mps", probe)
    assert source is None and "not on mps" in why
    meter = EnergyMeter(None, why)
    assert meter.block() == {"measured": False, "reason": why}


def test_nvml_index_follows_uuid_then_cuda_visible_devices():
    devs = [GpuInfo(i, "G", f"GPU-{c}", 1, 0, None) for i, c in enumerate("abc")]
    assert nvml_index(0, devs, "c", None) == 2  # torch's UUID wins over the order
    assert nvml_index(0, devs, None, "1,2") == 1
    assert nvml_index(1, devs, None, "GPU-c,GPU-a") == 0
    assert nvml_index(2, devs, None, "1") is None
    assert nvml_index(1, devs, None, None) == 1 and nvml_index(5, devs, None, None) is None


# ---------------------------------------------------------------- power polling


def test_power_polling_integrates_a_known_power_curve_within_two_percent():
    clock = ManualClock()

    def watts(t: float) -> float:
        return 180.0 + 60.0 * math.sin(2 * math.pi * t / 2.7)

    probe = EnergyProbe(clock, watts=watts, counter=False)
    interval = 0.1
    sampler = TelemetrySampler(probe, interval, clock=clock)
    source = PowerPolling(sampler, 0)
    meter = EnergyMeter(source)
    meter.begin()
    steps, step_s, next_sample = 0, 0.037, 0.0
    while clock.now_ns() / 1e9 < 6.2:  # the sampler ticks on its interval between the steps
        clock.advance(step_s)
        steps += 1
        meter.mark(steps)
        while clock.now_ns() / 1e9 >= next_sample:
            sampler.sample_once()
            next_sample += interval
    sampler.sample_once()
    per_step, _ = meter.end("train.bs2", 2, warmup=5, samples=[2] * steps)
    block = meter.block()
    windows = block["batch_sizes"]["2"]["windows"]
    assert block["source"] == "power-polling" and block["interval_s"] == interval
    for w, v in zip(windows, per_step.values, strict=True):
        t0, t1 = w["start_s"], w["start_s"] + w["seconds"]
        # exact ∫(180 + 60 sin(2πt/2.7)) dt over [t0, t1]
        k = 2 * math.pi / 2.7
        exact = 180.0 * (t1 - t0) + 60.0 / k * (math.cos(k * t0) - math.cos(k * t1))
        assert w["joules"] == pytest.approx(exact, rel=0.02)
        assert v == pytest.approx(exact / w["steps"], rel=0.02)


def test_power_integration_needs_samples_near_both_edges():
    points = [(0.0, 100.0), (0.1, 100.0), (0.2, 100.0)]
    assert integrate_power(points, 0.0, 0.2, 0.15) == pytest.approx(20.0)
    assert integrate_power(points, 0.05, 0.3, 0.15) == pytest.approx(25.0)  # held ≤ 0.15 s
    assert integrate_power(points, 0.0, 0.5, 0.15) is None  # no sample near the end
    assert integrate_power(points[:1], 0.0, 0.1, 0.15) is None


# ---------------------------------------------------------------- RAPL


def _zone(root: Path, name: str, label: str, uj: int, top: int = 1_000_000) -> Path:
    z = root / name
    z.mkdir(parents=True)
    (z / "name").write_text(label + "\n")
    (z / "energy_uj").write_text(f"{uj}\n")
    (z / "max_energy_range_uj").write_text(f"{top}\n")
    return z


def test_rapl_sums_the_packages_and_unwraps_the_counter(tmp_path):
    clock = ManualClock()
    p0 = _zone(tmp_path, "intel-rapl:0", "package-0", 900_000)
    p1 = _zone(tmp_path, "intel-rapl:1", "package-1", 100)
    _zone(tmp_path, "intel-rapl:0:0", "core", 5)  # inside package 0: not added again
    _zone(tmp_path, "intel-rapl:2", "psys", 7)  # the platform: holds the packages
    source, why = open_rapl(tmp_path, clock)
    assert why == "" and source is not None
    assert source.describe()["zones"] == ["intel-rapl:0 (package-0)", "intel-rapl:1 (package-1)"]
    a = Mark(0, 0.0, source.read_j())
    (p0 / "energy_uj").write_text("200000\n")  # wrapped at 1 J: +100,000 + 200,000 µJ
    (p1 / "energy_uj").write_text("50100\n")  # +50,000 µJ
    b = Mark(10, 2.0, source.read_j())
    assert source.between_j(a, b) == pytest.approx(0.35)
    w = measure_window(source, a, b, samples=10)
    assert w.flag == "" and w.joules == pytest.approx(0.35)


def test_rapl_absent_or_unreadable_says_why(tmp_path, monkeypatch):
    source, why = open_rapl(tmp_path / "nothing")
    assert source is None and why.startswith("RAPL absent")
    z = _zone(tmp_path, "intel-rapl:0", "package-0", 1)
    real = Path.read_text

    def denied(self, *a, **k):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", denied)
    source, why = open_rapl(tmp_path)
    assert source is None and "permission denied" in why and str(z / "energy_uj") in why
    monkeypatch.setattr(Path, "read_text", real)
    (z / "energy_uj").unlink()
    (z / "energy_uj").mkdir()  # not a file: unreadable, with the system's reason
    source, why = open_rapl(tmp_path)
    assert source is None and why.startswith("RAPL not readable")
    meter = energy.EnergyMeter(*open_source("cpu", NullProbe(), powercap=tmp_path))
    assert meter.block()["measured"] is False and "RAPL not readable" in meter.block()["reason"]


def test_replicates_pool_their_windows():
    one = {"measured": True, "source": "rapl", "batch_sizes": {"8": {"windows": [{"steps": 1}]}}}
    two = {"measured": True, "source": "rapl", "batch_sizes": {"8": {"windows": [{"steps": 2}]}}}
    pooled = pooled_block([one, None, two])
    assert pooled is not None and pooled["source"] == "rapl"
    assert pooled["batch_sizes"]["8"]["windows"] == [
        {"steps": 1, "replicate": 0},
        {"steps": 2, "replicate": 2},
    ]
    assert pooled_block([None, None]) is None


# ---------------------------------------------------------------- the throughput run


class WattClock:
    """A RAPL-like counter source at a constant 40 W on the real clock (the run is real)."""

    name = "rapl"
    update_period_s = 0.001

    def __init__(self) -> None:
        import time

        self._now = time.perf_counter

    def now_s(self) -> float:
        return self._now()

    def read_j(self) -> float | None:
        return 40.0 * self._now()

    def between_j(self, a: Mark, b: Mark) -> float | None:
        return energy._counter_difference(a, b)

    def describe(self) -> dict:
        return {"covers": "a fake 40 W package"}


def _tiny(**over):
    """The slow test model (a 3×8×8 classifier, a known 10 ms forward), one process."""
    from mlbaseline.config import resolve

    base = {
        "workload.model": "workloads_slow:slow_model",
        "workload.model_kwargs": {"forward_s": 0.01},
        "workload.dataset": "workloads_slow:slow_dataset",
        "workload.dataset_kwargs": {"n": 64},
        "workload.loss": "workloads_slow:SlowLoss",
        "workload.device": "cpu",
        "workload.threads": 1,
        "throughput.mode": "train",
        "throughput.batch_sizes": [4],
        "throughput.repeats": 1,
        "throughput.warmup_min": 2,
        "throughput.warmup_max": 3,
        "throughput.window": 4,
        "throughput.telemetry": False,
        "throughput.control_every": 0,
        **over,
    }
    return resolve(None, "demo", base)


def test_throughput_run_gives_energy_metrics_and_the_block(monkeypatch):
    from mlbaseline.runners.throughput import run_throughput

    monkeypatch.setattr(energy, "open_source", lambda *a, **k: (WattClock(), ""))
    cfg = _tiny(**{"throughput.min_time_s": 1.3, "throughput.max_steps": 400})
    result = run_throughput(cfg, probe=NullProbe())
    per_step = result.measurements["train.bs4.energy_per_step"]
    per_sample = result.measurements["train.bs4.energy_per_sample"]
    step = result.measurements["train.bs4.step"]
    assert per_step.meta["role"] == "energy" and per_step.meta["window_s"] >= 1.0
    assert len(per_step.values) >= 1 and len(per_sample.values) == len(per_step.values)
    # 40 W × (the step plus the loop between steps): a little above 40 W × the step time
    median_step = sorted(step.values)[len(step.values) // 2]
    assert 40.0 * median_step * 0.8 < min(per_step.values) < 40.0 * median_step * 2
    assert per_sample.values == pytest.approx([v / 4 for v in per_step.values])
    block = result.data["energy"]
    assert block["measured"] is True and block["source"] == "rapl"


def test_cpu_run_without_rapl_says_not_measured(monkeypatch, tmp_path):
    from mlbaseline.runners.throughput import run_throughput

    monkeypatch.setattr(energy, "POWERCAP", tmp_path / "absent")
    result = run_throughput(_tiny(**{"throughput.max_steps": 8}), probe=NullProbe())
    assert result.data["energy"]["measured"] is False
    assert result.data["energy"]["reason"].startswith("RAPL absent")
    assert not any(n.endswith("energy_per_step") for n in result.measurements)


# ---------------------------------------------------------------- make gpu-check


def test_gpu_energy_check_skips_clearly_without_a_gpu():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_energy_check.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    assert "gpu energy check: no GPU: skipped" in done.stdout


@pytest.mark.gpu
@pytest.mark.skipif(
    not __import__("torch").cuda.is_available(), reason="needs a CUDA device and NVML"
)
def test_real_nvml_counter_moves_over_a_second_of_cuda_work():
    import torch

    from mlbaseline.measure.gpu import default_probe

    probe = default_probe()
    try:
        source, why = open_source("cuda", probe)
        assert source is not None, why
        a = Mark(0, source.now_s(), source.read_j())
        x = torch.randn(4096, 4096, device="cuda")
        steps = 0
        while source.now_s() - a.t_s < 1.2:
            x = x @ x
            x = x / x.norm()
            torch.cuda.synchronize()
            steps += 1
        b = Mark(steps, source.now_s(), source.read_j())
        w = measure_window(source, a, b, samples=steps)
        assert w.flag == "" and w.joules is not None
        watts = w.joules / w.seconds
        assert 10.0 < watts < 2000.0  # a busy GPU draws tens to hundreds of watts
    finally:
        probe.close()


# ---------------------------------------------------------------- compared like time


def _energy_result(rng, step_factor: float, energy_factor: float):
    from mlbaseline.results import Metric, Result

    r = Result(kind="throughput")
    rep = [i % 8 for i in range(40)]
    step = 0.05 * step_factor * rng.lognormal(0.0, 0.01, 40)
    meta = {"group": "train.bs8", "role": "total", "stages": []}
    r.add_metric(Metric("train.bs8.step", "s", False, step, replicate=rep, meta=meta))
    joules = 6.0 * energy_factor * rng.lognormal(0.0, 0.01, 16)
    meta = {"group": "train.bs8", "role": "energy", "source": "nvml-counter", "window_s": 1.0}
    reps = [i % 8 for i in range(16)]
    r.add_metric(Metric("train.bs8.energy_per_step", "J", False, joules, replicate=reps, meta=meta))
    return r


def test_energy_is_judged_like_time_in_compare():
    import numpy as np

    from mlbaseline.comparison import compare_results
    from mlbaseline.config import CompareConfig

    rng = np.random.default_rng(7)
    c = compare_results(_energy_result(rng, 1, 1), _energy_result(rng, 1.3, 1.3), CompareConfig())
    verdicts = {m.name: m.verdict for m in c.metrics}
    assert verdicts["train.bs8.step"] == "regressed"
    assert verdicts["train.bs8.energy_per_step"] == "regressed"
    same = compare_results(_energy_result(rng, 1, 1), _energy_result(rng, 1, 1), CompareConfig())
    assert {m.name: m.verdict for m in same.metrics}["train.bs8.energy_per_step"] != "regressed"


def test_energy_moves_alone_and_is_still_judged():
    """A step that draws 30% more joules at the same speed (a power change) is tested on its
    own: it is a headline, not held behind a step time that did not move."""
    import numpy as np

    from mlbaseline.comparison import compare_results
    from mlbaseline.config import CompareConfig

    rng = np.random.default_rng(11)
    c = compare_results(_energy_result(rng, 1, 1), _energy_result(rng, 1, 1.3), CompareConfig())
    verdicts = {m.name: m.verdict for m in c.metrics}
    assert verdicts["train.bs8.step"] != "regressed"
    assert verdicts["train.bs8.energy_per_step"] == "regressed"


@pytest.mark.gpu
@pytest.mark.skipif(
    not __import__("torch").cuda.is_available(), reason="needs a CUDA device and NVML"
)
def test_gpu_energy_check_prints_the_memory_and_energy_lines(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "gpu_energy_check.py"),
            "--seconds",
            "2",
            "--batch-size",
            "32",
            "--json",
            str(tmp_path / "energy.json"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gpu energy check: CUDA memory: peak allocated" in done.stdout
    assert "J/step" in done.stdout and "nvml-counter" in done.stdout


def test_gpu_energy_check_lines_from_its_figures():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gec", ROOT / "bench" / "gpu_energy_check.py")
    assert spec is not None and spec.loader is not None
    gec = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gec)
    windows = [{"flag": "", "joules": 300.0, "seconds": 1.2}, {"flag": "", "joules": 250.0,
               "seconds": 1.0}]  # fmt: skip
    figures = {
        "gpu": "Fake GPU",
        "model": "m",
        "batch_size": 32,
        "median_step_s": 0.05,
        "peak_allocated_bytes": 3 * 2**30,
        "peak_reserved_bytes": 4 * 2**30,
        "energy": {
            "source": "nvml-counter",
            "min_window_s": 1.0,
            "batch_sizes": {"32": {"windows": windows}},
        },
        "energy_per_step_j": 12.5,
        "energy_per_sample_j": 0.39,
        "mean_power_w": 250.0,
    }
    text, ok = gec.lines(figures)
    assert ok and text[0].startswith("gpu energy check: CUDA memory: peak allocated 3,072 MiB")
    assert text[1] == (
        "gpu energy check: energy: 12.5 J/step, 0.39 J/sample, mean 250 W over 2 window(s) "
        "of >= 1 s (nvml-counter, step 50.0 ms)"
    )
    missing = {**figures, "energy_per_step_j": None, "mean_power_w": None,
               "energy": {"measured": False, "reason": "no NVML: driver"}}  # fmt: skip
    text, ok = gec.lines(missing)
    assert not ok and text[1] == "gpu energy check: energy NOT measured: no NVML: driver"
