"""Gradient accumulation with bf16 autocast, clipping and an LR scheduler.

In the style of the accumulation recipes of the PyTorch AMP and Hugging Face docs: 4
micro-batches per optimizer step, each forward under `torch.autocast("cpu", torch.bfloat16)`, the
loss divided by the accumulation count, `clip_grad_norm_` before `AdamW.step()`, a `StepLR`
scheduler stepped after it. Synthetic data, no download. Busy-wait stages offered to the tests
(MLB_TEST_BUSY, see _knobs.py): loss (right before each micro-batch's backward: four times a
step) and optimizer (an optimizer step pre-hook, once a step).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from _knobs import busy, configure, finish, steps
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4


def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), target)


def main() -> None:
    configure({"loss", "optimizer"})
    torch.manual_seed(2)
    torch.set_num_threads(1)  # the test machine's cores are shared; one thread keeps steps steady
    features, labels = torch.randn(2048, 256), torch.randint(0, 8, (2048,))
    loader = DataLoader(TensorDataset(features, labels), batch_size=32, shuffle=True)
    model = nn.Sequential(
        nn.Linear(256, 768), nn.GELU(), nn.Linear(768, 768), nn.GELU(), nn.Linear(768, 8)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    optimizer.register_step_pre_hook(lambda *_: busy("optimizer"))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.7)
    total, done, epoch = steps(64), 0, 0
    while done < total:
        epoch += 1
        model.train()
        for i, (x, y) in enumerate(loader):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = loss_fn(model(x), y) / ACCUMULATION_STEPS
            busy("loss")  # the loss stage's very end: see _knobs.busy
            loss.backward()
            if (i + 1) % ACCUMULATION_STEPS == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                done += 1
                if done == total:
                    break
        print(f"epoch {epoch}: steps {done} lr {scheduler.get_last_lr()[0]:.6f}", flush=True)
    finish(f"accum_amp steps={done} loss={loss.item() * ACCUMULATION_STEPS:.4f}")


if __name__ == "__main__":
    main()
