"""A PyTorch Lightning callback on the library API: `pip install mlbaseline[lightning]`.

    from mlbaseline.api.lightning import MlbCallback

    trainer = Trainer(callbacks=[MlbCallback("mlb-results/lightning.json")])

One training batch is one step of a `Baseline`, its stages cut at Lightning's hooks:
`data_wait` (from the previous batch's end to this batch's start: the fetch, plus Lightning's
own work between batches such as logging), `forward` (`training_step`: forward and loss),
`zero_grad`, `backward` (with DDP, the overlapped gradient all-reduce too) and `optimizer`
(from the end of backward to the batch's end: clipping and `optimizer.step()`). The residual is
what falls outside them. A step's samples are its batches' own (`batch_size_of`: a smaller
last batch counts as what it holds; `MlbCallback(batch_size=N)` counts N a batch). When the
stop rule is met the result is written (and, with `stop_training=True`, training stops; else
the Baseline is advisory, `data.stop.advisory` in the result, and training goes on,
unmeasured); a run that ends first writes it at `on_train_end`, its stop reason `loop_ended`.
Under DDP every rank measures and rank 0 writes the pooled result.
With `accumulate_grad_batches=N` a step is N batches (one optimizer step, their stages added
up), recorded as `workload.grad_accum`; the step ends where Lightning steps the optimizer (its
epoch loop's `_should_accumulate`): an epoch's last batch ends a shorter step too (its samples
are the batches it had), and a validation run inside an accumulation stays in that step, timed
as its stage `validation`; a mixed precision as `workload.amp`, a true one as
`workload.dtype` (comparability keys, as for `mlb throughput`).
The result names the LightningModule's class as its model (`lightning:pkg.module.Class`; a
`model=` keyword says otherwise), and when it is written rank 0 prints one summary line on
stderr: the path, the steps, why they stopped and what happens to the training now, the step
median with its CI (`quiet=True`: none).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from mlbaseline.api.baseline import Baseline

STAGES = ("data_wait", "forward", "zero_grad", "backward", "optimizer")
# what the training does once the result is written: the end of the summary line
_GOES_ON = "training goes on, unmeasured (MlbCallback(stop_training=True) stops it here)"
_STOPS = "training stopped here (stop_training=True)"


def model_name(module: Any) -> str:
    """The LightningModule's class as `workload.model`: `lightning:pkg.module.Class`."""
    cls = type(module)
    return f"lightning:{cls.__module__}.{cls.__qualname__}"


def batch_size_of(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)) and batch:
        return batch_size_of(batch[0])
    raise ValueError("cannot tell the batch size of this batch: pass MlbCallback(batch_size=N)")


# Lightning's precision → what mlb records (workload.amp: autocast; workload.dtype: the model's)
_PRECISION = {
    "16-mixed": {"amp": "float16"},
    "bf16-mixed": {"amp": "bfloat16"},
    "16-true": {"overrides": {"workload.dtype": "float16"}},
    "bf16-true": {"overrides": {"workload.dtype": "bfloat16"}},
}


def trainer_keys(trainer: pl.Trainer) -> dict[str, Any]:
    """The Trainer's settings that are comparability keys for mlb: gradient accumulation (a
    step is one optimizer step over N batches, as `workload.grad_accum`) and the precision."""
    keys: dict[str, Any] = {"grad_accum": int(trainer.accumulate_grad_batches)}
    keys.update(_PRECISION.get(str(trainer.precision), {}))
    return keys


class MlbCallback(pl.Callback):
    """Measure `trainer.fit`'s training steps with `mlb`; see the module docstring.
    `path`: the result JSON (`force` to overwrite); `batch_size`: the samples counted per batch
    (default each batch's own, `batch_size_of`; the `train.bs{B}` group is the first batch's);
    other keyword arguments go to `Baseline` (`config=`, `overrides=`, `telemetry=`, …)."""

    def __init__(
        self,
        path: str | Path,
        name: str = "lightning",
        batch_size: int | None = None,
        *,
        force: bool = False,
        stop_training: bool = False,
        **baseline_kwargs: Any,
    ) -> None:
        self.path, self.name, self.batch_size = Path(path), name, batch_size
        self.force, self.stop_training = force, stop_training
        # the callback prints its own line (with what the training does next): not Baseline's
        self.quiet = bool(baseline_kwargs.pop("quiet", False))
        self.kwargs = baseline_kwargs
        self.baseline: Baseline | None = None
        self.saved: Path | None = None
        self._stage: Any = None  # the open stage block
        self._batches = 0  # batches in the open step
        self._samples = 0  # their samples: a short last batch counts as what it holds

    # ------------------------------------------------------------ stage cursor

    def _switch(self, name: str | None) -> None:
        """Close the open stage, open `name` (if any) in the current step."""
        if self._stage is not None:
            self._stage.__exit__(None, None, None)
            self._stage = None
        bl = self.baseline
        if name is not None and bl is not None and not bl.ended:
            self._stage = bl.stage(name)
            self._stage.__enter__()

    def _drop_pending(self) -> None:
        """A step begun at the last batch's end (its data wait) that no batch follows."""
        bl = self.baseline
        if bl is not None and self._stage is not None:
            self._switch(None)
            bl.abort_step()
        self._batches = self._samples = 0

    @staticmethod
    def _accumulating(trainer: pl.Trainer, batch_idx: int) -> bool:
        """Whether Lightning holds the optimizer step after this batch: its epoch loop's own
        rule (N batches, or the epoch's last batch, unless the strategy accumulates itself);
        the plain modulo where a Trainer lacks it."""
        loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
        should = getattr(loop, "_should_accumulate", None)
        if callable(should):
            return bool(should())
        return bool((batch_idx + 1) % trainer.accumulate_grad_batches)

    # ------------------------------------------------------------ hooks

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self.baseline is None:
            size = self.batch_size or batch_size_of(batch)
            # this rank's GPU (cuda:N) for the CUDA-event timer and memory meter; any other
            # accelerator is timed on the host clock
            device = str(pl_module.device) if pl_module.device.type == "cuda" else "cpu"
            found = trainer_keys(trainer)
            kwargs = {**found, **self.kwargs}  # what the user says wins, key by key
            kwargs["overrides"] = {**found.get("overrides", {}), **self.kwargs.get("overrides", {})}
            kwargs.setdefault("model", model_name(pl_module))
            # the stop rule ends the measurement, not the training, unless stop_training:
            # the result's data.stop says so (advisory) and where measuring ended
            kwargs.setdefault("advisory", not self.stop_training)
            self.baseline = Baseline(self.name, size, device, stages=STAGES, quiet=True, **kwargs)
        bl = self.baseline
        if bl.ended:
            return
        if self._stage is None:  # the first batch of an epoch: no data wait seen
            bl.begin_step()
            self._batches = self._samples = 0
        self._switch("forward")

    def on_before_zero_grad(self, trainer: pl.Trainer, pl_module: Any, optimizer: Any) -> None:
        self._switch("zero_grad")

    def on_before_backward(self, trainer: pl.Trainer, pl_module: Any, loss: Any) -> None:
        self._switch("backward")

    def on_after_backward(self, trainer: pl.Trainer, pl_module: Any) -> None:
        self._switch("optimizer")

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        bl = self.baseline
        if bl is None or bl.ended:
            return
        self._batches += 1
        self._samples += self.batch_size or batch_size_of(batch)
        if self._accumulating(trainer, batch_idx):
            self._switch("data_wait")  # mid-accumulation: the optimizer step is still to come
            return
        self._switch(None)
        bl.end_step(self._samples)
        self._batches = self._samples = 0
        if bl.ended:
            if self.stop_training:
                trainer.should_stop = True
            self._save(_STOPS if self.stop_training else _GOES_ON)
            return
        bl.begin_step()  # the next step begins now: its first stage is the data wait
        self._switch("data_wait")

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._drop_pending()

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._batches and self._stage is not None:
            # inside an accumulation: the step goes on after it (its optimizer step is still
            # to come), validation timed apart from the data wait
            self._switch("validation")
        else:
            self._drop_pending()  # validation is not the next batch's data wait

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._drop_pending()
        self._save()

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        bl = self.baseline
        if bl is None:
            return
        self._switch(None)
        bl.abort_step(exception)
        if isinstance(exception, KeyboardInterrupt):
            self._save()  # the steps so far, marked interrupted
        else:
            bl.close()

    def _save(self, then: str = "") -> None:
        """Write the result once (rank 0; every rank takes part in the gathering) and print
        the summary line, `then` saying what the training does now."""
        bl = self.baseline
        if bl is None or self.saved is not None:
            return
        written = bl.save(self.path, force=self.force)
        self.saved = written or self.path
        if written is not None and bl.summary and not self.quiet:
            print(bl.summary + (f"; {then}" if then else ""), file=sys.stderr)


__all__ = ["STAGES", "MlbCallback", "batch_size_of", "model_name", "trainer_keys"]
