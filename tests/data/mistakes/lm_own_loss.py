"""Spell a word backwards, with the task's own loss. The user writes the loss themselves, as
many loops do; `loss` chooses how:

- `"sum"`: the sum of per-token cross-entropies over the supervised targets (what the pilot's
  contract asks: it divides by the targets of the whole update) — correct;
- `"mean"`: `F.cross_entropy(..., reduction="mean")` — a mean per microbatch, so an update's
  loss depends on how its examples are grouped (the gradient-accumulation bug);
- `"smoothing_over_ignored"`: label smoothing written by hand, its uniform term summed over
  every position, the ignored ones (-100) included (padding too, so it also depends on how
  the examples are grouped);
- `"unshifted"`: the logits at t scored against the label at t, not t + 1: the model learns to
  copy the token it is given, whatever the grouping.
"""

import random

import torch
import torch.nn.functional as F
from torch import nn

from pilot_tui.tasks.contract import CAUSAL_LM, Task

ALPHABET = "abcdefgh"
PAD, BOS, SEP, EOS = 0, 1, 2, 3
VOCAB = 4 + len(ALPHABET)
IGNORE = -100


def tokens(text):
    return [4 + ALPHABET.index(c) for c in text]


def examples(n=48, seed=2):
    rng = random.Random(seed)
    # Lengths from 2 to 9: the microbatches of an update hold different numbers of targets.
    words = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(2, 9))) for _ in range(n)]
    return [{"id": f"w{i}", "doc": f"d{i // 2}", "word": w} for i, w in enumerate(words)]


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.mix = nn.Linear(16, 16)
        self.out = nn.Linear(16, VOCAB)

    def forward(self, input_ids, attention_mask=None):
        return self.out(torch.tanh(self.mix(self.embed(input_ids))))


def collate(batch, max_length):
    seqs = [[BOS, *tokens(ex["word"]), SEP, *tokens(ex["word"][::-1]), EOS] for ex in batch]
    seqs = [s[:max_length] if max_length else s for s in seqs]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), PAD)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    labels = torch.full((len(seqs), width), IGNORE)
    for r, s in enumerate(seqs):
        ids[r, : len(s)] = torch.tensor(s)
        mask[r, : len(s)] = 1
        start = s.index(SEP) + 1 if SEP in s else len(s)
        labels[r, start : len(s)] = ids[r, start : len(s)]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def make_task(loss="sum"):
    def own_loss(logits, batch):
        flat = logits[:, :-1].reshape(-1, VOCAB).float()
        labels = batch["labels"][:, 1:].reshape(-1)
        count = (labels != IGNORE).sum()
        if loss == "unshifted":
            flat, labels = logits.reshape(-1, VOCAB).float(), batch["labels"].reshape(-1)
        if loss == "mean":
            return F.cross_entropy(flat, labels, ignore_index=IGNORE), count
        if loss == "smoothing_over_ignored":
            eps = 0.1
            logp = flat.log_softmax(-1)
            nll = F.nll_loss(logp, labels, ignore_index=IGNORE, reduction="sum")
            uniform = -logp.mean(-1).sum()  # every position, the ignored ones too
            return (1 - eps) * nll + eps * uniform, count
        return F.cross_entropy(flat, labels, ignore_index=IGNORE, reduction="sum"), count

    names = {PAD: "_", BOS: "^", SEP: "|", EOS: "$"}
    return Task(
        name="reverse-own-loss",
        kind=CAUSAL_LM,
        examples=examples(),
        build_model=TinyLM,
        collate=collate,
        group_key="doc",
        decode_token=lambda t: names.get(t) or ALPHABET[t - 4],
        loss=own_loss,
        default_max_length=32,
    )
