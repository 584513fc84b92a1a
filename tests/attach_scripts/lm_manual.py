"""A language-model loop with a carried hidden state and a manual SGD update.

In the style of pytorch/examples word_language_model/main.py: the corpus is one long tensor of
token ids (synthetic here, no download) batchified into columns, batches are slices of it (no
DataLoader), an LSTM carries its hidden state from batch to batch (`repackage_hidden` detaches
it), gradients are clipped and the update is done by hand, `p.data.add_(p.grad, alpha=-lr)`,
with no `torch.optim` at all. Busy-wait stages offered to the tests (MLB_TEST_BUSY, see
_knobs.py): backward (an autograd Function whose backward spins) and optimizer (right before
the forward: the end of a manual update's stage).
"""

from __future__ import annotations

from typing import Any

import torch
from _knobs import busy, configure, finish, steps
from torch import nn

BPTT, BATCH, VOCAB, CLIP = 16, 8, 200, 0.25


class BusyBackward(torch.autograd.Function):
    """Identity forward; its backward busy-waits: work that only the backward pass does."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        busy("backward")
        return grad


class RNNModel(nn.Module):
    def __init__(self, ntoken: int, ninp: int, nhid: int) -> None:
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid = nhid

    def forward(self, tokens: torch.Tensor, hidden: tuple) -> tuple:
        # on the embedding's output, so that its backward spins last in the backward pass
        output, hidden = self.rnn(BusyBackward.apply(self.encoder(tokens)), hidden)
        return self.decoder(output).view(-1, self.decoder.out_features), hidden

    def init_hidden(self, bsz: int) -> tuple:
        weight = next(self.parameters())
        return (weight.new_zeros(1, bsz, self.nhid), weight.new_zeros(1, bsz, self.nhid))


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    nbatch = data.size(0) // bsz
    return data[: nbatch * bsz].view(bsz, -1).t().contiguous()


def get_batch(source: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    seq_len = min(BPTT, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


def repackage_hidden(h: tuple | torch.Tensor) -> tuple | torch.Tensor:
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def main() -> None:
    configure({"backward", "optimizer"})
    torch.manual_seed(3)
    torch.set_num_threads(1)  # the test machine's cores are shared; one thread keeps steps steady
    train_data = batchify(torch.randint(0, VOCAB, (BATCH * (BPTT * 30 + 1),)), BATCH)
    model, criterion, lr = RNNModel(VOCAB, 32, 64), nn.CrossEntropyLoss(), 5.0
    total, done, epoch = steps(64), 0, 0
    while done < total:
        epoch += 1
        model.train()
        hidden = model.init_hidden(BATCH)
        for i in range(0, train_data.size(0) - 1, BPTT):
            data, targets = get_batch(train_data, i)
            model.zero_grad()
            hidden = repackage_hidden(hidden)
            # with a manual update the optimizer stage runs from backward's end to the next
            # forward (the batch's slicing and zero_grad in it): its very end is here
            busy("optimizer")
            output, hidden = model(data, hidden)
            loss = criterion(output, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            done += 1
            if done == total:
                break
        print(f"| epoch {epoch:3d} | steps {done:4d} | loss {loss.item():5.2f}", flush=True)
    finish(f"lm_manual steps={done} loss={loss.item():.4f}")


if __name__ == "__main__":
    main()
