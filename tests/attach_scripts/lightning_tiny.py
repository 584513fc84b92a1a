"""A PyTorch Lightning Trainer on a tiny module, as in Lightning's own quick-start.

A `LightningModule` whose `training_step` computes the loss, `configure_optimizers` returns
Adam; `Trainer(max_steps=…)` on CPU, no logger, no checkpoints, no progress bar (so stdout is
the script's own). Lightning runs forward and backward inside `optimizer.step(closure)`.
Synthetic data, no download. Busy-wait stages offered to the tests (MLB_TEST_BUSY, see
_knobs.py): forward (in the module's forward), loss (in the module's `backward` hook, right
before `loss.backward()`) and backward (an autograd Function whose backward spins).
"""

from __future__ import annotations

import logging
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from _knobs import busy, configure, finish, steps
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class BusyBackward(torch.autograd.Function):
    """Identity forward; its backward busy-waits: work that only the backward pass does."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        busy("backward")
        return grad


class LitClassifier(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 4)
        )
        self.last_loss = float("nan")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        busy("forward")
        return BusyBackward.apply(self.net(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.last_loss = loss.item()
        return loss

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        # Lightning's hook for a custom backward: the loss stage's very end (see _knobs.busy)
        busy("loss")
        super().backward(loss, *args, **kwargs)

    def on_train_epoch_end(self) -> None:
        print(f"epoch {self.current_epoch} step {self.global_step} loss {self.last_loss:.4f}")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main() -> None:
    configure({"forward", "loss", "backward"})
    # Lightning's banner ("GPU available: …") goes through logging; keep the test's stderr short
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    pl.seed_everything(4, verbose=False)
    torch.set_num_threads(1)  # the test machine's cores are shared; one thread keeps steps steady
    data = TensorDataset(torch.randn(20480, 256), torch.randint(0, 4, (20480,)))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps(64),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = LitClassifier()
    trainer.fit(model, DataLoader(data, batch_size=512, shuffle=True))
    finish(f"lightning steps={trainer.global_step} loss={model.last_loss:.4f}")


if __name__ == "__main__":
    main()
