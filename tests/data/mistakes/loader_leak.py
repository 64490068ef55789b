"""Classify points, batches collated in DataLoader workers. `leak_mb` > 0: the collate keeps a
reference to what it built (a module-level cache that is never emptied, as a "memoise the
tokenised rows" helper does) — each batch leaves that many MiB in its worker for good; the run
dies of host memory hours in, whatever the GPU holds."""

import torch
from torch import nn

from pilot_tui.tasks.contract import CLASSIFICATION, Task

KEPT = []  # per process: each loader worker has its own, and it only grows
CHUNK = bytes(range(256)) * 4096  # 1 MiB, written (so resident), not just reserved


def make_task(leak_mb=0):
    data = [{"id": f"e{k}", "group": f"g{k // 2}", "x": [k % 3, k % 5], "y": k % 2} for k in range(64)]

    def collate(batch, max_length):
        for _ in range(int(leak_mb)):
            KEPT.append(bytearray(CHUNK))
        return {
            "features": torch.tensor([r["x"] for r in batch], dtype=torch.float32),
            "labels": torch.tensor([r["y"] for r in batch]),
        }

    return Task(
        name="leaky-loader",
        kind=CLASSIFICATION,
        examples=data,
        collate=collate,
        group_key="group",
        build_model=lambda: nn.Linear(2, 2),
        class_names=["even", "odd"],
    )
