"""`measure.step`: the per-micro-batch path builds nothing it can build once, and an empty
DataLoader is one mlb error (exit 2), not a bare StopIteration."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mlbaseline.errors import DatasetError, ExitCode
from mlbaseline.measure.step import Batches, Precision, TrainStep
from mlbaseline.measure.timers import CpuStageTimer


def _loader(n: int, batch: int = 2, drop_last: bool = False) -> DataLoader:
    ds = TensorDataset(torch.randn(n, 4), torch.randint(0, 3, (n,)))
    return DataLoader(ds, batch_size=batch, drop_last=drop_last)


@pytest.mark.parametrize("n,drop_last", [(0, False), (1, True)])
def test_an_empty_dataloader_is_one_dataset_error(n, drop_last):
    batches = Batches(_loader(n, batch=2, drop_last=drop_last))
    with pytest.raises(DatasetError, match="yields no batches") as info:
        next(batches)
    assert info.value.exit_code == ExitCode.BAD_INPUT == 2


def test_a_short_epoch_still_starts_the_next_one():
    batches = Batches(_loader(2, batch=2))
    assert [len(next(batches)[0]) for _ in range(3)] == [2, 2, 2]
    assert batches.epochs == 2


class _CountingPrecision(Precision):
    def __init__(self) -> None:
        super().__init__()
        self.built = 0

    def autocast(self) -> Any:
        self.built += 1
        return super().autocast()


class _SyncModel(nn.Module):
    """A model with DDP's `no_sync`: counts the lookups and the skipped syncs."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.lookups = self.skipped = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)

    def __getattr__(self, name: str) -> Any:
        if name == "no_sync":
            self.__dict__["lookups"] = self.__dict__.get("lookups", 0) + 1
            return self._no_sync
        return super().__getattr__(name)

    @contextlib.contextmanager
    def _no_sync(self):
        self.skipped += 1
        yield


def test_autocast_and_no_sync_are_looked_up_once_not_per_micro_batch():
    model, precision = _SyncModel(), _CountingPrecision()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = TrainStep(
        model,
        nn.CrossEntropyLoss(),
        opt,
        Batches(_loader(16)),
        "cpu",
        torch.float32,
        CpuStageTimer(),
        precision=precision,
        accum=4,
    )
    for _ in range(3):
        record = step()
    assert record.samples == 8
    assert precision.built == 1 and model.lookups == 1
    assert model.skipped == 3 * 3  # same semantics: all but the last micro-batch skip the sync
