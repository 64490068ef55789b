"""Classify short sequences of readings with an encoder and a head. Two real mistakes, one
option: `mistake = "unused_head"` builds an auxiliary head that forward never calls;
`mistake = "detached"` runs the encoder under `torch.no_grad()` (features "precomputed")."""

import random

import torch
from torch import nn

from pilot_tui.tasks.contract import CLASSIFICATION, Task


class Model(nn.Module):
    def __init__(self, mistake):
        super().__init__()
        self.mistake = mistake
        self.encoder = nn.Sequential(nn.Linear(6, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.head = nn.Linear(64, 3)
        self.aux_head = nn.Linear(64, 8)  # meant for an auxiliary loss

    def forward(self, x):
        if self.mistake == "detached":
            with torch.no_grad():
                h = self.encoder(x)
        else:
            h = self.encoder(x)
        out = self.head(h)
        if self.mistake != "unused_head":
            out = out + 0 * self.aux_head(h).sum(-1, keepdim=True)  # the auxiliary head is used
        return out


def make_task(mistake=""):
    rng = random.Random(0)
    data = [
        {
            "id": f"s{k}",
            "sensor": f"n{k // 4}",
            "x": [rng.uniform(-1, 1) for _ in range(6)],
            "y": k % 3,
            "kind": ["idle", "walk", "run"][k % 3],
        }
        for k in range(48)
    ]

    def collate(batch, max_length):
        return {
            "features": torch.tensor([r["x"] for r in batch]),
            "labels": torch.tensor([r["y"] for r in batch]),
        }

    return Task(
        name="activity",
        kind=CLASSIFICATION,
        examples=data,
        collate=collate,
        group_key="sensor",
        build_model=lambda: Model(mistake),
        class_names=["idle", "walk", "run"],
    )
