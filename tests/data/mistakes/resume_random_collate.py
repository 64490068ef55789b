"""Reverse a word, with word-piece dropout as augmentation: the collate replaces each input
letter by `<unk>` with probability 0.1, drawing from torch's global RNG (`augment`). Run with
`batch.num_workers > 0`, the draws happen in loader workers seeded when the iterator starts,
so a resume in the middle of an epoch draws other masks than the uninterrupted run. Without
`augment` (or with num_workers = 0) the same file resumes exactly."""

import random

import torch
from torch import nn

from pilot_tui.tasks.contract import CAUSAL_LM, Task

ALPHABET = "abcdefgh"
PAD, BOS, SEP, EOS, UNK = 0, 1, 2, 3, 4
VOCAB = 5 + len(ALPHABET)


def tokens(text):
    return [5 + ALPHABET.index(c) for c in text]


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.out = nn.Linear(16, VOCAB)

    def forward(self, input_ids, attention_mask=None):
        return self.out(self.embed(input_ids))


def make_task(augment=False):
    rng = random.Random(6)
    words = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(3, 7))) for _ in range(48)]

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
            start = s.index(SEP) + 1
            labels[r, start : len(s)] = ids[r, start : len(s)]
            if augment:  # dropout on the prompt letters only
                drop = torch.rand(start - 2) < 0.1
                ids[r, 1 : start - 1][drop] = UNK
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    return Task(
        name="reverse-augmented",
        kind=CAUSAL_LM,
        examples=[{"id": f"w{i}", "doc": f"d{i // 2}", "word": w} for i, w in enumerate(words)],
        build_model=TinyLM,
        collate=collate,
        group_key="doc",
        default_max_length=32,
    )
