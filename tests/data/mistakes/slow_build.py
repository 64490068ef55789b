"""A model whose construction takes a while (here a sleep; for real, weights read from a slow
disk or a large random initialisation), or a task that takes a while to open (`open_s`: for
real, 100 000 rows tokenised or a script's `dataset.map`)."""

import time

import torch
from torch import nn

from pilot_tui.tasks.contract import CLASSIFICATION, Task


def make_task(sleep_s=0.0, open_s=0.0):
    time.sleep(open_s)
    data = [
        {
            "id": f"e{k}",
            "group": f"g{k // 2}",
            "x": [k % 3, k % 5],
            "y": k % 2,
            "name": ["even", "odd"][k % 2],
        }
        for k in range(40)
    ]

    def build():
        time.sleep(sleep_s)
        return nn.Linear(2, 2)

    def collate(batch, max_length):
        return {
            "features": torch.tensor([r["x"] for r in batch], dtype=torch.float32),
            "labels": torch.tensor([r["y"] for r in batch]),
        }

    return Task(
        name="slow",
        kind=CLASSIFICATION,
        examples=data,
        collate=collate,
        build_model=build,
        class_names=["even", "odd"],
    )
