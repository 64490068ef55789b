"""Answer `capital? <country>` with a city. The collate computes the prompt length and masks
the prompt, but counts the separator twice: the first answer token is masked too."""

import torch
from torch import nn

from pilot_tui.tasks.contract import CAUSAL_LM, Task

CHARS = " abcdefghijklmnopqrstuvwxyz?:"
PAD, BOS, EOS = 0, 1, 2
VOCAB = 3 + len(CHARS)
PAIRS = [
    ("france", "paris"),
    ("italy", "rome"),
    ("spain", "madrid"),
    ("peru", "lima"),
    ("japan", "tokyo"),
    ("egypt", "cairo"),
    ("chile", "santiago"),
    ("kenya", "nairobi"),
    ("cuba", "havana"),
    ("iran", "tehran"),
]


def encode(text):
    return [3 + CHARS.index(c) for c in text]


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.mix = nn.GRU(16, 16, batch_first=True)
        self.out = nn.Linear(16, VOCAB)

    def forward(self, input_ids, attention_mask=None):
        return self.out(self.mix(self.embed(input_ids))[0])


def make_task(off_by_one=False):
    data = [
        {"id": f"q{i}", "country": c, "prompt": f"capital? {c}:", "answer": city}
        for i, (c, city) in enumerate(PAIRS * 4)
    ]

    def collate(batch, max_length):
        rows, prompts = [], []
        for ex in batch:
            prompt = [BOS, *encode(ex["prompt"])]
            rows.append((prompt + encode(ex["answer"]) + [EOS])[: max_length or None])
            prompts.append(len(prompt))
        width = max(map(len, rows))
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros_like(ids)
        labels = torch.full_like(ids, -100)
        for r, (row, plen) in enumerate(zip(rows, prompts, strict=True)):
            ids[r, : len(row)] = torch.tensor(row)
            mask[r, : len(row)] = 1
            masked = plen + 1 if off_by_one else plen  # the bug: one token too many
            labels[r, masked : len(row)] = ids[r, masked : len(row)]
        return {
            "input_ids": ids,
            "attention_mask": mask,
            "labels": labels,
            "prompt_length": torch.tensor(prompts),
        }

    return Task(
        name="capitals",
        kind=CAUSAL_LM,
        examples=data,
        build_model=TinyLM,
        collate=collate,
        group_key="country",
        decode_token=lambda t: {0: "_", 1: "^", 2: "$"}.get(t) or CHARS[t - 3],
        default_max_length=32,
    )
