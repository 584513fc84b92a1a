"""A Hugging Face `transformers.Trainer` on a tiny config-built BERT, as in the text-classification
examples, with nothing downloaded.

The model is built from a `BertConfig` (random weights, no hub access: offline mode is forced
before the import), the dataset is synthetic token ids, `TrainingArguments` on the CPU with no
reporting, no saving, no logging and no tqdm bar (so stdout is the script's own); the Trainer
computes its own (class-weighted) loss, as the Trainer docs show. Busy-wait stages offered to the
tests (MLB_TEST_BUSY, see _knobs.py): forward (a forward pre-hook on the model, so inside its
call) and loss (in `compute_loss`, after the forward).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch
import torch.nn.functional as F
from _knobs import busy, configure, finish, steps
from torch.utils.data import Dataset
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    PrinterCallback,
    Trainer,
    TrainingArguments,
)

SEQ_LEN, VOCAB = 32, 512
CLASS_WEIGHTS = torch.tensor([1.0, 2.0])


class WeightedLossTrainer(Trainer):
    """A Trainer with its own loss, as the Trainer docs show (`compute_loss` overridden): the
    model runs without labels, the loss is computed after its forward."""

    def compute_loss(
        self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, **kwargs: Any
    ) -> Any:
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        loss = F.cross_entropy(outputs.logits, labels, weight=CLASS_WEIGHTS)
        busy("loss")
        return (loss, outputs) if return_outputs else loss


class SyntheticText(Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(5)
        self.ids = torch.randint(1, VOCAB, (n, SEQ_LEN), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {
            "input_ids": self.ids[i],
            "attention_mask": torch.ones(SEQ_LEN, dtype=torch.long),
            "labels": self.labels[i],
        }


def main() -> None:
    configure({"forward", "loss"})
    torch.set_num_threads(1)  # the test machine's cores are shared; one thread keeps steps steady
    torch.manual_seed(5)
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=SEQ_LEN,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    model.register_forward_pre_hook(lambda *_: busy("forward"))
    with tempfile.TemporaryDirectory(prefix="hf-trainer-test-") as out:
        args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=64,
            max_steps=steps(64),
            learning_rate=1e-3,
            seed=5,
            use_cpu=True,
            report_to=[],
            logging_strategy="no",
            save_strategy="no",
            disable_tqdm=True,
        )
        trainer = WeightedLossTrainer(model=model, args=args, train_dataset=SyntheticText(2048))
        trainer.remove_callback(PrinterCallback)  # its end-of-training line has timings in it
        result = trainer.train()
    print(f"global_step {result.global_step}", flush=True)
    finish(f"hf_trainer steps={result.global_step} loss={result.training_loss:.4f}")


if __name__ == "__main__":
    main()
