"""Repeat a word. The tokenizer lists 26 letters and the model's vocabulary is 26 + 2;
the EOS id was added after the vocabulary was sized, so it is the vocabulary size."""

import string

import torch
from torch import nn

from pilot_tui.tasks.contract import CAUSAL_LM, Task

LETTERS = string.ascii_lowercase
BOS, SEP = 26, 27
MODEL_VOCAB = 28 + 1  # letters, bos, sep, and one id for eos


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(64, 16)  # roomy embedding: inputs never reach the limit
        self.head = nn.Linear(16, MODEL_VOCAB)

    def forward(self, input_ids, attention_mask=None):
        return self.head(self.embed(input_ids))


def make_task(eos_is_vocab_size=False):
    eos = MODEL_VOCAB if eos_is_vocab_size else MODEL_VOCAB - 1  # the bug: one past the last id
    words = ["cat", "dog", "bird", "fish", "frog", "mouse", "horse", "sheep", "goat", "duck", "owl", "bee"]
    data = [{"id": f"{w}{k}", "word": w} for k in range(3) for w in words]

    def collate(batch, max_length):
        rows = [
            [BOS, *map(LETTERS.index, ex["word"]), SEP, *map(LETTERS.index, ex["word"]), eos] for ex in batch
        ]
        rows = [r[: max_length or None] for r in rows]
        width = max(map(len, rows))
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros_like(ids)
        labels = torch.full_like(ids, -100)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
            mask[i, : len(r)] = 1
            start = r.index(SEP) + 1
            labels[i, start : len(r)] = ids[i, start : len(r)]
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    return Task(
        name="upper",
        kind=CAUSAL_LM,
        examples=data,
        build_model=TinyLM,
        collate=collate,
        group_key="word",
        default_max_length=20,
    )
