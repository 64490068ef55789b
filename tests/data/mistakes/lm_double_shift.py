"""Reverse a word, character by character. The user's collate shifts the labels itself
(`labels[t] = input_ids[t + 1]`), as many training loops do, but the runner shifts again."""

import random

import torch
from torch import nn

from pilot_tui.tasks.contract import CAUSAL_LM, Task

ALPHABET = "abcdefgh"
PAD, BOS, SEP, EOS = 0, 1, 2, 3
VOCAB = 4 + len(ALPHABET)


def tokens(text):
    return [4 + ALPHABET.index(c) for c in text]


def examples(n=48, seed=1):
    rng = random.Random(seed)
    words = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(3, 7))) for _ in range(n)]
    return [{"id": f"w{i}", "doc": f"d{i // 2}", "word": w} for i, w in enumerate(words)]


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.out = nn.Linear(16, VOCAB)

    def forward(self, input_ids, attention_mask=None):
        return self.out(self.embed(input_ids))


def make_task(shift=False):
    def collate(batch, max_length):
        seqs = [[BOS, *tokens(ex["word"]), SEP, *tokens(ex["word"][::-1]), EOS] for ex in batch]
        seqs = [s[:max_length] if max_length else s for s in seqs]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), PAD)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        labels = torch.full((len(seqs), width), -100)
        for r, s in enumerate(seqs):
            ids[r, : len(s)] = torch.tensor(s)
            mask[r, : len(s)] = 1
            start = s.index(SEP) + 1 if SEP in s else len(s)
            if shift:  # the bug: the runner shifts too
                labels[r, start - 1 : len(s) - 1] = ids[r, start : len(s)]
            else:
                labels[r, start : len(s)] = ids[r, start : len(s)]
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    names = {PAD: "_", BOS: "^", SEP: "|", EOS: "$"}
    return Task(
        name="reverse",
        kind=CAUSAL_LM,
        examples=examples(),
        build_model=TinyLM,
        collate=collate,
        group_key="doc",
        decode_token=lambda t: names.get(t) or ALPHABET[t - 4],
        default_max_length=32,
    )
