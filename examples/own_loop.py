"""Your own training loop, measured by mlb: a torchvision ResNet-18 trained on a small image
folder (generated into a temporary directory) with mixed precision where available (bfloat16
autocast on CPU; float16 autocast and a GradScaler on CUDA), gradient accumulation, gradient
clipping, a learning-rate schedule and a custom collate function.

Every line added or changed for mlb ends with `# mlb` (fewer than 15;
`tests/test_api_example.py` counts them); the code under a `with bl.stage(...)` line is the
loop's own, one level deeper. `grad_accum` makes each optimizer step (ACCUM batches) one
measured step; it and `amp` are recorded in the result like `mlb throughput`'s
`workload.grad_accum` / `workload.amp`, so a change of either makes two results not comparable. The
result is an ordinary `throughput` result file:

    python examples/own_loop.py -o mlb-results/own-before.json
    # … change something …
    python examples/own_loop.py -o mlb-results/own-after.json
    mlb compare mlb-results/own-before.json mlb-results/own-after.json
    mlb report mlb-results/own-after.json -o mlb-results/own-report

`--mlb-config FILE.yaml` takes any mlb config (its `throughput:` stop rule, say); the test
runs the example with a small one.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader
from torchvision import datasets, models, transforms

from mlbaseline.api import Baseline  # mlb

CLASSES, PER_CLASS, SIDE = 4, 32, 40  # 128 images of 40×40 pixels
ACCUM = 2  # micro-batches per optimizer step


def make_image_folder(root: Path, seed: int = 0) -> Path:
    """One folder per class of PNGs; each class has its own mean colour, plus noise."""
    rng = np.random.default_rng(seed)
    for c in range(CLASSES):
        folder = root / f"class{c}"
        folder.mkdir(parents=True)
        base = rng.integers(0, 256, size=3)
        for i in range(PER_CLASS):
            noise = rng.normal(0, 40, size=(SIDE, SIDE, 3))
            pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / f"{i:03d}.png")
    return root


def collate(samples: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack the images, normalize the batch by its own statistics, labels as one tensor."""
    images = torch.stack([s[0] for s in samples])
    mean = images.mean(dim=(0, 2, 3), keepdim=True)
    std = images.std(dim=(0, 2, 3), keepdim=True).clamp_min(1e-3)
    return (images - mean) / std, torch.tensor([s[1] for s in samples])


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=Path("mlb-results/own.json"))
    parser.add_argument("--force", action="store_true", help="overwrite the result file")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=8, help="per micro-batch")
    parser.add_argument("--mlb-config", type=Path, default=None)  # mlb
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> Path | None:
    args = parse(argv)
    torch.manual_seed(0)
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    amp_dtype = torch.float16 if cuda else torch.bfloat16
    scaler = torch.amp.GradScaler("cuda", enabled=cuda)
    with tempfile.TemporaryDirectory(prefix="mlb-own-loop-") as tmp:
        augment = transforms.Compose([transforms.RandomCrop(32), transforms.ToTensor()])
        dataset = datasets.ImageFolder(make_image_folder(Path(tmp)), transform=augment)
        loader = DataLoader(
            dataset, batch_size=args.batch_size, shuffle=True, collate_fn=collate,
            drop_last=True, pin_memory=cuda,
        )  # fmt: skip
        model = models.resnet18(num_classes=CLASSES).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
        loss_fn = nn.CrossEntropyLoss()
        loop = dict(grad_accum=ACCUM, amp=str(amp_dtype).removeprefix("torch."))  # mlb
        bl = Baseline("own-loop", args.batch_size, device, config=args.mlb_config, **loop)  # mlb
        model.train()
        for _epoch in range(args.epochs):
            for i, (images, labels) in enumerate(bl.data(loader)):  # mlb
                if bl.done:  # mlb
                    break  # mlb
                with bl.stage("h2d"):  # mlb
                    images = images.to(device, non_blocking=True)
                    labels = labels.to(device, non_blocking=True)
                with bl.stage("forward"), torch.autocast(device, dtype=amp_dtype):  # mlb
                    loss = loss_fn(model(images), labels) / ACCUM
                with bl.stage("backward"):  # mlb
                    scaler.scale(loss).backward()
                if (i + 1) % ACCUM == 0:
                    with bl.stage("optimizer"):  # mlb
                        scaler.unscale_(optimizer)
                        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
                        scaler.step(optimizer)
                        scaler.update()
                        optimizer.zero_grad(set_to_none=True)
            schedule.step()
            if bl.done:  # mlb
                break  # mlb
        return bl.save(args.output, force=args.force)  # mlb


if __name__ == "__main__":
    print(main())
