"""Workload options of the CLI path (issue 17 item 3): gradient accumulation, AMP (autocast +
GradScaler, a fake where CUDA is absent), channels_last and torch.compile (its compile time
kept out of warm-up and the steady state, a failure one error line); each a comparability key."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.comparison.matching import environment_differences
from mlbaseline.config import WORKLOAD_OPTION_KEYS, resolve
from mlbaseline.envinfo import fingerprint
from mlbaseline.errors import ConfigError
from mlbaseline.measure.clock import ManualClock
from mlbaseline.measure.gpu import NullProbe
from mlbaseline.measure.step import Precision, TrainStep, make_precision
from mlbaseline.measure.timers import CpuStageTimer
from mlbaseline.results import Metric, Result, write_result
from mlbaseline.runners import sweep
from mlbaseline.runners.throughput import run_throughput
from mlbaseline.workloads.factory import build_dataset

runner = CliRunner()
TINY = {
    "workload.model": "builtin:tiny_cnn",
    "workload.image_size": 16,
    "workload.dataset_size": 64,
    "workload.device": "cpu",
    "workload.threads": 1,
    "throughput.mode": "train",
    "throughput.batch_sizes": [4],
    "throughput.min_time_s": 0.0,
    "throughput.repeats": 1,  # one process: replicates are tested apart
    "throughput.min_steps": 6,
    "throughput.max_steps": 6,
    "throughput.window": 4,
    "throughput.warmup_min": 1,
    "throughput.warmup_max": 2,
    "throughput.telemetry": False,
}


def cfg(**over: Any):
    return resolve(None, "demo", {**TINY, **over})


class Recorder(nn.Module):
    """A linear classifier that records what it was given and computed."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, num_classes)
        self.calls: list[dict[str, Any]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        self.calls.append(
            {
                "batch": x.shape[0],
                "channels_last": x.is_contiguous(memory_format=torch.channels_last)
                and not x.is_contiguous(),
                "dtype": h.dtype,
            }
        )
        return self.head(h.mean((2, 3)))


class CountingSGD(torch.optim.SGD):
    steps = 0

    def step(self, closure: Any = None) -> Any:
        CountingSGD.steps += 1
        return super().step(closure)


def batches(n: int, batch: int = 4, side: int = 8):
    g = torch.Generator().manual_seed(0)
    return iter(
        [
            (torch.randn(batch, 3, side, side, generator=g), torch.randint(0, 10, (batch,)))
            for _ in range(n)
        ]
    )


def make_step(model: nn.Module, data: Any, **kw: Any) -> TrainStep:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return TrainStep(
        model, nn.CrossEntropyLoss(), opt, data, "cpu", torch.float32, CpuStageTimer(), **kw
    )


# ---------------------------------------------------------------- gradient accumulation


def test_one_step_is_one_optimizer_step_over_n_micro_batches():
    """accum=3: three micro-batches drawn and run, stages summed over them, one optimizer
    step whose gradient is the mean over the micro-batches (the same as one batch of 12)."""
    torch.manual_seed(0)
    a, b = Recorder(), Recorder()
    b.load_state_dict(a.state_dict())
    data = list(batches(3))
    step = make_step(a, iter(data), accum=3)
    opt = step.optimizer
    grads: list[torch.Tensor] = []
    opt.register_step_pre_hook(lambda *_: grads.append(a.head.weight.grad.clone()))
    record = step()
    assert record.samples == 12 and len(a.calls) == 3 and len(grads) == 1
    assert set(record.times.stages) == {"data_wait", "h2d", "forward", "loss", "backward"} | {
        "optimizer"
    }
    x = torch.cat([d[0] for d in data])
    y = torch.cat([d[1] for d in data])
    nn.CrossEntropyLoss()(b(x), y).backward()
    torch.testing.assert_close(grads[0], b.head.weight.grad, rtol=1e-5, atol=1e-6)
    assert a.head.weight.grad is None or not a.head.weight.grad.any()  # zero_grad ran


def test_grad_accum_in_the_cli_path_counts_samples_per_optimizer_step():
    CountingSGD.steps = 0
    c = cfg(**{"workload.grad_accum": 2, "workload.optimizer": f"{__name__}:CountingSGD"})
    r = run_throughput(c, probe=NullProbe())
    train = r.data["batch_sizes"]["4"]["train"]
    assert train["grad_accum"] == 2 and train["samples_per_step"] == 8
    n_steps = train["warmup_steps"] + train["measured_steps"]
    assert CountingSGD.steps == n_steps
    step = r.measurements["train.bs4.step"].values
    rate = r.measurements["train.bs4.samples_per_s"].values
    assert rate == pytest.approx([8 / s for s in step])
    assert r.environment["blocking"]["workload.grad_accum"] == 2


# ---------------------------------------------------------------- AMP


def test_bfloat16_autocast_on_cpu_runs_forward_in_bfloat16():
    model = Recorder()
    step = make_step(model, batches(2), precision=make_precision("bfloat16", "cpu", torch.float32))
    step()
    assert model.calls[0]["dtype"] == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in model.parameters())  # weights stay float32
    plain = Recorder()
    make_step(plain, batches(1))()
    assert plain.calls[0]["dtype"] == torch.float32


class FakeScaler:
    """Stands in for torch.amp.GradScaler: records the calls, scales by 2**4."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        self.calls.append("scale")
        return loss * 16.0

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        self.calls.append("step")
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.div_(16.0)
        optimizer.step()

    def update(self) -> None:
        self.calls.append("update")


def test_float16_on_cuda_builds_a_grad_scaler_through_the_factory():
    fake = FakeScaler()
    p = make_precision("float16", "cuda:0", torch.float32, scaler_factory=lambda: fake)
    assert p.scaler is fake and p.device_type == "cuda" and p.amp == "float16"
    assert make_precision("bfloat16", "cuda", torch.float32).scaler is None  # bf16: no scaling


def test_the_step_scales_the_loss_once_per_micro_batch_and_steps_through_the_scaler():
    fake = FakeScaler()
    torch.manual_seed(0)
    a, b = Recorder(), Recorder()
    b.load_state_dict(a.state_dict())
    data = list(batches(2))
    make_step(a, iter(data), accum=2, precision=Precision("off", "cpu", fake))()
    assert fake.calls == ["scale", "scale", "step", "update"]
    make_step(b, iter(data), accum=2)()
    torch.testing.assert_close(a.head.weight, b.head.weight)  # unscaled before the step


@pytest.mark.parametrize(
    ("amp", "device", "dtype", "needle"),
    [
        ("float16", "cpu", torch.float32, "needs CUDA"),
        ("bfloat16", "cpu", torch.float16, "float32 model"),
    ],
)
def test_amp_that_cannot_run_is_one_config_error(amp, device, dtype, needle):
    with pytest.raises(ConfigError, match=needle):
        make_precision(amp, device, dtype)


def test_amp_float16_on_cpu_is_error_exit_2_in_the_cli(tmp_path: Path):
    res = runner.invoke(
        app, ["throughput", "--set", "workload.amp=float16", *sets(), "-o", str(tmp_path / "r")]
    )
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("Error: workload.amp: float16") and "Traceback" not in res.output


def sets(**over: Any) -> list[str]:
    out = []
    for key, value in {**TINY, **over}.items():
        out += ["--set", f"{key}={json.dumps(value)}"]
    return out


# ---------------------------------------------------------------- channels_last


def test_channels_last_converts_model_and_inputs():
    r = cfg(**{"workload.channels_last": True, "workload.model": f"{__name__}:Recorder"})
    step, batches_ = sweep.build_step(r, build_dataset(r), 4, "cpu", sweep.SingleProcess(), None)
    try:
        step()
        model = step.model
        assert model.conv.weight.is_contiguous(memory_format=torch.channels_last)
        assert model.calls[-1]["channels_last"]
    finally:
        batches_.close()
    off = cfg(**{"workload.model": f"{__name__}:Recorder"})
    step, batches_ = sweep.build_step(
        off, build_dataset(off), 4, "cpu", sweep.SingleProcess(), None
    )
    try:
        step()
        assert not step.model.calls[-1]["channels_last"]
    finally:
        batches_.close()


# ---------------------------------------------------------------- torch.compile


class FirstCallCosts(nn.Module):
    """A 'compiled' model whose first call costs 10 s on a manual clock (the compile), and
    every later call 1 ms: compile_s must be the first, and no step may contain it."""

    def __init__(self, inner: nn.Module, clock: ManualClock) -> None:
        super().__init__()
        self.inner, self.clock, self.n = inner, clock, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.n += 1
        self.clock.advance(10.0 if self.n == 1 else 0.001)
        return self.inner(x)


def test_compile_time_is_kept_out_of_warmup_and_steady_state(monkeypatch):
    clock = ManualClock()
    made: list[FirstCallCosts] = []

    def fake_compile(model: nn.Module, w: Any) -> nn.Module:
        assert w.compile == "default"
        made.append(FirstCallCosts(model, clock))
        return made[-1]

    monkeypatch.setattr(sweep, "compile_model", fake_compile)
    c = cfg(**{"workload.compile": "default"})
    run = sweep.train_one_size(c, build_dataset(c), 4, "cpu", clock=clock)
    assert run.compile_s == pytest.approx(10.0)
    values = [r.times.total_s for r in run.loop.records]
    assert values and max(values) < 1.0  # neither warm-up nor measured steps hold it
    assert made[0].n == 1 + len(run.loop.records)  # the compile call was one extra step
    assert run.info()["compile_s"] == pytest.approx(10.0)


def test_the_cli_prints_compile_s_apart_and_records_it(monkeypatch, tmp_path: Path):
    monkeypatch.setattr(sweep, "compile_model", lambda model, w: model)  # eager, same path
    out = tmp_path / "r.json"
    res = runner.invoke(
        app,
        ["throughput", *sets(**{"workload.compile": "default"}), "-o", str(out)],
        env={"COLUMNS": "200"},
    )
    assert res.exit_code == 0, res.output
    assert "compile bs4 train: " in res.output and "neither warm-up nor measured" in res.output
    doc = json.loads(out.read_text())
    assert doc["data"]["batch_sizes"]["4"]["train"]["compile_s"] > 0


def test_the_ab_arms_compile_before_their_warmup(monkeypatch):
    """mlb ab builds its arms with the same core: a compiled arm's first step is its
    compile_s, outside the alternating warm-up and the pairs."""
    from mlbaseline.runners.ab import run_ab

    clock = ManualClock()
    monkeypatch.setattr(
        sweep, "compile_model", lambda m, w: m if w.compile == "off" else FirstCallCosts(m, clock)
    )
    a = cfg(**{"throughput.control_every": 0})
    b = cfg(**{"workload.compile": "default", "throughput.control_every": 0})
    r = run_ab(a, b, pairs=4, clock=clock, probe=NullProbe())
    assert r.data["compile_s"] == {"a": None, "b": pytest.approx(10.0)}
    for arm in ("a", "b"):
        step = r.measurements[f"ab.{arm}.step"]
        assert max(step.values + step.warmup) < 1.0


def test_without_compile_there_is_no_compile_call(monkeypatch):
    c = cfg()
    run = sweep.train_one_size(c, build_dataset(c), 4, "cpu")
    assert run.compile_s is None and run.info()["compile_s"] is None


def _failing_backend(gm: Any, example_inputs: Any) -> Any:
    raise RuntimeError("no C++ compiler here (test backend)")


def test_a_compile_failure_is_one_error_line_exit_2(monkeypatch, tmp_path: Path):
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda m, mode=None: real(m, backend=_failing_backend))
    res = runner.invoke(
        app, ["throughput", *sets(**{"workload.compile": "default"}), "-o", str(tmp_path / "r")]
    )
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: workload.compile: torch.compile failed")
    assert "workload.compile: off" in lines[0] and not (tmp_path / "r").exists()


@pytest.mark.slow
def test_real_torch_compile_on_cpu_reports_compile_s():
    """The real inductor path (gcc here): training and inference each report compile_s."""
    c = cfg(**{"workload.compile": "default", "throughput.mode": "both"})
    r = run_throughput(c, probe=NullProbe())
    entry = r.data["batch_sizes"]["4"]
    assert entry["status"] == "ok", entry
    assert entry["train"]["compile_s"] > 0 and entry["inference"]["compile_s"] > 0
    assert r.environment["blocking"]["workload.compile"] == "default"


# ---------------------------------------------------------------- comparability


def _result(config: dict[str, Any]) -> Result:
    r = Result(kind="throughput", config=config)
    r.environment = fingerprint(config, NullProbe(), "cpu")
    r.add_metric(Metric("train.bs4.step", "s", False, [0.1, 0.11, 0.12, 0.1, 0.11, 0.1]))
    return r


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("workload.compile", "default"),
        ("workload.amp", "bfloat16"),
        ("workload.grad_accum", 4),
        ("workload.channels_last", True),
    ],
)
def test_each_option_is_a_blocking_key_and_compare_exits_3(tmp_path: Path, key: str, value: Any):
    base = cfg().to_dict()
    other = copy.deepcopy(base)
    other["workload"][key.split(".")[1]] = value
    old, new = _result(base), _result(other)
    blocking, _ = environment_differences(old, new)
    assert [row["key"] for row in blocking] == [key]
    a = write_result(old, tmp_path / "a.json")
    b = write_result(new, tmp_path / "b.json")
    res = runner.invoke(app, ["compare", str(a), str(b)])
    assert res.exit_code == 3, res.output
    assert res.stderr.startswith("Error: ") and key in res.stderr


def test_a_result_that_predates_the_options_compares_as_their_defaults():
    new = _result(cfg().to_dict())
    old = _result(cfg().to_dict())
    for key in WORKLOAD_OPTION_KEYS:
        del old.environment["blocking"][key]
    assert environment_differences(old, new)[0] == []
    amp = _result(cfg(**{"workload.amp": "bfloat16"}).to_dict())
    rows = environment_differences(old, amp)[0]
    assert rows == [{"key": "workload.amp", "old": "off", "new": "bfloat16"}]


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("workload.compile", "fast", "is not one of off, default"),
        ("workload.amp", "fp8", "is not one of off, bfloat16, float16"),
        ("workload.grad_accum", 0, "must be ≥ 1"),
        ("workload.channels_last", "yes", "expected true or false"),
    ],
)
def test_bad_option_values_are_config_errors(key: str, value: Any, needle: str):
    with pytest.raises(ConfigError, match=needle):
        cfg(**{key: value})


@pytest.mark.slow
def test_grad_accum_under_two_gloo_processes_in_both_sync_modes():
    """Explicit all-reduce once per optimizer step, and DDP without sync on all but the last
    micro-batch: both modes run, each step counting 2 micro-batches on each of 2 ranks."""
    c = cfg(**{"workload.grad_accum": 2, "throughput.nproc": 2, "golden.subset_size": 64})
    r = run_throughput(c, probe=NullProbe())
    assert r.status == "complete", r.notes
    entry = r.data["batch_sizes"]["4"]
    for part, prefix in (("train", "train.bs4"), ("train_ddp", "train.bs4.ddp")):
        assert entry[part]["grad_accum"] == 2, part
        step = r.measurements[f"{prefix}.step"].values
        rate = r.measurements[f"{prefix}.samples_per_s"].values
        assert rate == pytest.approx([2 * 2 * 4 / s for s in step])
