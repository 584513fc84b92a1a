"""The PyTorch Lightning callback against the real package (the `test` extra installs it, so CI
runs this): a tiny LightningModule trained for a few dozen steps on CPU gives a valid
throughput result with Lightning's stages, and the stop rule can end the training."""

from __future__ import annotations

import signal

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mlbaseline.api.lightning import STAGES, MlbCallback, batch_size_of, trainer_keys
from mlbaseline.measure.gpu import NullProbe
from mlbaseline.results import load_result

RULE = {
    "throughput.min_time_s": 0.0,
    "throughput.repeats": 1,  # one process: replicates are tested apart
    "throughput.min_steps": 6,
    "throughput.max_steps": 200,
    "throughput.window": 3,
    "throughput.warmup_min": 1,
    "throughput.warmup_max": 8,
    # a shared machine's noise must not stop a test from settling: loose windows
    "throughput.stability_tolerance": 0.5,
    "throughput.warmup_tolerance": 0.5,
}


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def loader(n: int = 256, batch: int = 8) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(n, 16, generator=g), torch.randint(0, 4, (n,), generator=g))
    return DataLoader(ds, batch_size=batch)


def trainer(callback: MlbCallback, **kw) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
        **kw,
    )


def callback(path, **kw) -> MlbCallback:
    return MlbCallback(path, overrides=RULE, telemetry=False, probe=NullProbe(), **kw)


def test_callback_writes_a_result_with_lightnings_stages(tmp_path):
    torch.manual_seed(0)
    cb = callback(tmp_path / "pl.json", stop_training=True)
    t = trainer(cb, max_epochs=20)
    t.fit(Tiny(), loader())
    bl = cb.baseline
    assert bl is not None and bl.done and bl.loop.reason in ("stable", "max_steps")
    assert t.global_step == len(bl.loop.records)  # stop_training ended fit at the rule
    r = load_result(tmp_path / "pl.json", ["throughput"])
    assert r.data["stages"] == list(STAGES) and r.data["source"] == "api"
    m = r.measurements
    for s in STAGES:
        assert f"train.bs8.{s}" in m
    assert all(v > 0 for v in m["train.bs8.forward"].values)
    assert all(v > 0 for v in m["train.bs8.backward"].values)
    for i, total in enumerate(m["train.bs8.step"].values):
        parts = sum(m[f"train.bs8.{s}"].values[i] for s in STAGES)
        assert total == pytest.approx(parts + m["train.bs8.residual"].values[i])
    # every batch but an epoch's first has a data wait (from the batch before's end)
    zeros = sum(r.times.stages.get("data_wait", 0.0) == 0.0 for r in bl.loop.records)
    assert zeros <= t.current_epoch + 1


def test_a_fit_that_ends_first_still_writes_its_result(tmp_path):
    strict = {**RULE, "throughput.min_steps": 50}  # cannot be met in 12 steps
    cb = MlbCallback(tmp_path / "short.json", "short", overrides=strict, telemetry=False,
                     probe=NullProbe())  # fmt: skip
    trainer(cb, max_steps=12).fit(Tiny(), loader())
    r = load_result(tmp_path / "short.json")
    assert r.data["name"] == "short"
    entry = r.data["batch_sizes"]["8"]
    assert entry["stop_reason"] == "loop_ended"
    assert {c.name: c.status for c in r.verdict.checks}["train.bs8.stop_rule"] == "warn"
    assert entry["train"]["n"] + entry["train"]["warmup_steps"] == 12


def test_trainer_keys_of_precision_and_accumulation():
    t = pl.Trainer(accelerator="cpu", precision="bf16-true", accumulate_grad_batches=3,
                   logger=False, enable_progress_bar=False)  # fmt: skip
    assert trainer_keys(t) == {"grad_accum": 3, "overrides": {"workload.dtype": "bfloat16"}}
    assert trainer_keys(pl.Trainer(accelerator="cpu", logger=False)) == {"grad_accum": 1}


def test_batch_size_of_common_batches():
    x = torch.zeros(5, 3)
    assert batch_size_of((x, torch.zeros(5))) == 5
    assert batch_size_of({"input": x}) == 5 and batch_size_of(x) == 5
    with pytest.raises(ValueError, match="batch_size"):
        batch_size_of(object())


class Interrupted(Tiny):
    """Ctrl-C in the 9th training step."""

    def training_step(self, batch, batch_idx):
        if self.trainer.global_step == 8:
            raise KeyboardInterrupt
        return super().training_step(batch, batch_idx)


def test_ctrl_c_in_fit_saves_the_steps_so_far_marked_interrupted(tmp_path):
    strict = {**RULE, "throughput.min_steps": 100}
    cb = MlbCallback(tmp_path / "int.json", overrides=strict, telemetry=False, probe=NullProbe())
    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit):  # Lightning's graceful shutdown ends in sys.exit(1)
            trainer(cb, max_epochs=5).fit(Interrupted(), loader())
    finally:
        signal.signal(signal.SIGINT, handler)  # Lightning ignores SIGINT from then on
    r = load_result(tmp_path / "int.json")
    assert r.status == "interrupted"
    entry = r.data["batch_sizes"]["8"]
    assert entry["stop_reason"] == "interrupted"
    assert entry["train"]["n"] + entry["train"]["warmup_steps"] == 8  # the 9th is not kept


def test_under_ddp_every_rank_measures_and_rank_0_writes_one_pooled_result(tmp_path):
    """Lightning's own DDP (2 forked CPU ranks, gloo): the callback's Baseline sees the process
    group, both ranks stop at rank 0's decision, one result holds both ranks' values."""
    cb = MlbCallback(tmp_path / "ddp.json", overrides=RULE, telemetry=False, probe=NullProbe(),
                     stop_training=True)  # fmt: skip
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # forked ranks: no OpenMP thread team inherited half-made
    try:
        t = pl.Trainer(
            accelerator="cpu",
            devices=2,
            strategy="ddp_fork",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[cb],
            max_epochs=20,
        )
        t.fit(Tiny(), loader())
    finally:
        torch.set_num_threads(threads)
    r = load_result(tmp_path / "ddp.json")
    assert r.data["distributed"] == {"world_size": 2, "backend": "gloo"}
    step = r.measurements["train.bs8.step"]
    assert sorted(set(step.rank)) == [0, 1] and step.rank.count(0) == step.rank.count(1)
    assert r.data["stages"] == list(STAGES)


def test_accumulation_and_precision_are_recorded_like_the_clis(tmp_path):
    """accumulate_grad_batches=2: a step is one optimizer step over 2 batches (16 samples);
    bf16-mixed precision is workload.amp=bfloat16; both comparability keys."""
    cb = MlbCallback(tmp_path / "acc.json", overrides=RULE, telemetry=False, probe=NullProbe(),
                     stop_training=True)  # fmt: skip
    t = trainer(cb, max_epochs=20, accumulate_grad_batches=2, precision="bf16-mixed")
    t.fit(Tiny(), loader())
    bl = cb.baseline
    assert bl is not None and bl.done
    assert t.global_step == len(bl.loop.records)  # one step per optimizer step
    assert all(r.samples == 16 for r in bl.loop.records)
    r = load_result(tmp_path / "acc.json")
    assert r.config["workload"]["grad_accum"] == 2 and r.config["workload"]["amp"] == "bfloat16"
    assert r.environment["blocking"]["workload.amp"] == "bfloat16"
    assert r.data["batch_sizes"]["8"]["train"]["samples_per_step"] == 16


def _long(path, **kw) -> MlbCallback:
    """A rule that is not met in these short fits: every step is kept to on_train_end."""
    strict = {**RULE, "throughput.min_steps": 500, "throughput.max_steps": 1000}
    return MlbCallback(path, overrides=strict, telemetry=False, probe=NullProbe(), **kw)


def test_an_epochs_last_shorter_accumulation_is_one_step_as_lightning_steps(tmp_path):
    """10 batches an epoch, accumulate 3: Lightning steps after batches 3, 6, 9 and 10 (the
    epoch's last); so does mlb, the last step holding the one batch it had."""
    cb = _long(tmp_path / "acc3.json")
    t = trainer(cb, max_epochs=2, accumulate_grad_batches=3)
    t.fit(Tiny(), loader(n=80))
    bl = cb.baseline
    assert bl is not None and t.global_step == 8
    assert [r.samples for r in bl.loop.records] == [24, 24, 24, 8] * 2


class Validated(Tiny):
    def validation_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)


def test_validation_inside_an_accumulation_keeps_the_step(tmp_path):
    """12 batches an epoch, accumulate 3, validation every 4 batches: the validation after
    batch 4 falls inside the second accumulation, which is still one step of 3 batches."""
    cb = _long(tmp_path / "val.json")
    t = trainer(cb, max_epochs=2, accumulate_grad_batches=3, val_check_interval=4,
                num_sanity_val_steps=0, limit_val_batches=2)  # fmt: skip
    t.fit(Validated(), loader(n=96), loader(n=32))
    bl = cb.baseline
    assert bl is not None and t.global_step == 8 == len(bl.loop.records)
    assert all(r.samples == 24 for r in bl.loop.records)
    validated = [i for i, r in enumerate(bl.loop.records) if "validation" in r.times.stages]
    assert validated == [1, 2, 5, 6]  # batches 4 and 8 of each epoch: steps 2 and 3


def test_a_smaller_last_batch_counts_the_samples_it_holds(tmp_path):
    """84 samples in batches of 8 (drop_last=False): 10 batches of 8 and a last one of 4, which
    is a step of 4 samples, and its samples/s is 4 over its step time (not 8 over it)."""
    cb = _long(tmp_path / "short_last.json")
    t = trainer(cb, max_epochs=2)
    t.fit(Tiny(), loader(n=84))
    bl = cb.baseline
    assert bl is not None and t.global_step == 22 == len(bl.loop.records)
    assert [r.samples for r in bl.loop.records] == ([8] * 10 + [4]) * 2
    r = load_result(tmp_path / "short_last.json")
    m = r.measurements
    per_s, step = m["train.bs8.samples_per_s"], m["train.bs8.step"]
    scale = {"s": 1.0, "ms": 1e-3}[step.unit]
    counted = sorted(round(a * b * scale) for a, b in zip(per_s.values, step.values, strict=True))
    assert counted == [4, 4] + [8] * (len(counted) - 2)  # both epochs' short steps measured


def test_an_explicit_batch_size_is_counted_for_every_batch(tmp_path):
    """MlbCallback(batch_size=N) is the override: N samples a batch, the short last one too."""
    cb = _long(tmp_path / "fixed.json", batch_size=5)
    trainer(cb, max_epochs=1).fit(Tiny(), loader(n=84))
    bl = cb.baseline
    assert bl is not None and [r.samples for r in bl.loop.records] == [5] * 11
