"""Is a point inside the unit circle? A binary head the usual way: one logit and
`BCEWithLogitsLoss` (float labels) — or, for the twin, two logits and cross-entropy."""

import math
import random

import torch
import torch.nn.functional as F
from torch import nn

from pilot_tui.tasks.contract import CLASSIFICATION, Task


def make_task(one_logit=True):
    rng = random.Random(3)
    data = []
    for k in range(64):
        r, a = rng.uniform(0, 2), rng.uniform(0, 2 * math.pi)
        data.append(
            {
                "id": f"p{k}",
                "batch_no": f"b{k // 4}",
                "x": r * math.cos(a),
                "y": r * math.sin(a),
                "inside": int(r < 1),
            }
        )

    def collate(batch, max_length):
        x = torch.tensor([[p["x"], p["y"]] for p in batch])
        y = torch.tensor([p["inside"] for p in batch])
        return {"features": x, "labels": y.float() if one_logit else y}

    def bce(logits, batch):
        loss = F.binary_cross_entropy_with_logits(
            logits.squeeze(-1).float(), batch["labels"], reduction="sum"
        )
        return loss, torch.tensor(len(batch["labels"]))

    return Task(
        name="circle",
        kind=CLASSIFICATION,
        examples=data,
        collate=collate,
        group_key="batch_no",
        build_model=lambda: nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 1 if one_logit else 2)),
        loss=bce if one_logit else None,
        class_names=["outside", "inside"],
    )
