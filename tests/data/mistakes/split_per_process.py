"""Classify readings, with the split assigned in the task file: each row draws its split from
`random` (`seeded = False`: the module's generator, seeded by the OS in every process), so every
torchrun rank builds its own split and one rank's validation is another's train. Seeded, every
process draws the same."""

import random

import torch
from torch import nn

from pilot_tui.tasks.contract import CLASSIFICATION, Task


def make_task(seeded=True):
    draw = random.Random(0) if seeded else random
    data = []
    for k in range(64):
        split = draw.choices(["train", "validation", "test"], weights=[8, 1, 1])[0]
        data.append({"id": f"r{k}", "site": f"s{k}", "x": [k / 64, 1 - k / 64], "y": k % 2, "split": split})

    def collate(batch, max_length):
        return {
            "features": torch.tensor([r["x"] for r in batch]),
            "labels": torch.tensor([r["y"] for r in batch]),
        }

    return Task(
        name="readings-split",
        kind=CLASSIFICATION,
        examples=data,
        collate=collate,
        group_key="site",
        build_model=lambda: nn.Linear(2, 2),
        class_names=["low", "high"],
    )
