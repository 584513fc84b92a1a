"""A plain DataLoader training loop, in the style of pytorch/examples mnist/main.py.

Synthetic 1x28x28 "digits" (no download), a small CNN, SGD, cross-entropy. Busy-wait stages
offered to the tests (MLB_TEST_BUSY, see _knobs.py): data_wait (in the collate function, which
runs inside the DataLoader's `__next__`) and forward (in `Net.forward`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from _knobs import busy, configure, finish, steps
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, default_collate


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.fc1 = nn.Linear(16 * 12 * 12, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        busy("forward")
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


def collate(batch: list) -> list:
    collated = default_collate(batch)
    busy("data_wait")  # at the stage's end: see _knobs.busy
    return collated


def main() -> None:
    configure({"data_wait", "forward"})
    torch.manual_seed(1)
    torch.set_num_threads(1)  # the test machine's cores are shared; one thread keeps steps steady
    images, labels = torch.randn(512, 1, 28, 28), torch.randint(0, 10, (512,))
    loader = DataLoader(
        TensorDataset(images, labels), batch_size=32, shuffle=True, collate_fn=collate
    )
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    total, done, epoch = steps(64), 0, 0
    while done < total:
        epoch += 1
        model.train()
        for data, target in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data), target)
            loss.backward()
            optimizer.step()
            done += 1
            if done == total:
                break
        print(f"Train Epoch: {epoch} steps {done} loss: {loss.item():.4f}", flush=True)
    finish(f"plain steps={done} loss={loss.item():.4f}")


if __name__ == "__main__":
    main()
