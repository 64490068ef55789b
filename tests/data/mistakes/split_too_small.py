"""Classify readings as high or low, from a file a user cut to a few rows to try the tool
(`rows`): 12 rows leave one example for validation with the default 80/10/10 split; 40 rows
leave four."""

import torch
from torch import nn

from pilot_tui.tasks.contract import CLASSIFICATION, Task


def make_task(rows=12):
    data = [
        {"id": f"r{k}", "site": f"s{k}", "x": [k / rows, 1 - k / rows], "y": int(k % 2)} for k in range(rows)
    ]

    def collate(batch, max_length):
        return {
            "features": torch.tensor([r["x"] for r in batch]),
            "labels": torch.tensor([r["y"] for r in batch]),
        }

    return Task(
        name="readings",
        kind=CLASSIFICATION,
        examples=data,
        collate=collate,
        group_key="site",
        build_model=lambda: nn.Linear(2, 2),
        class_names=["low", "high"],
    )
