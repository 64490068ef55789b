"""Regress-as-classify house prices into three bands. Missing surface areas are read from the
CSV as NaN (`nan_every = 19`: every 19th row); nobody fills them, so the first update that draws
one turns the loss, then every weight, into NaN."""

import torch
from torch import nn

from pilot_tui.tasks.contract import CLASSIFICATION, Task


def make_task(nan_every=0):
    data = []
    for k in range(96):
        surface = float("nan") if nan_every and k % nan_every == 3 else 30.0 + (k * 37) % 120
        data.append(
            {
                "id": f"h{k}",
                "street": f"st{k // 2}",
                "x": [surface / 100, (k % 5) / 5],
                "band": int(k % 3),
                "band_name": ["low", "mid", "high"][k % 3],
            }
        )

    def collate(batch, max_length):
        return {
            "features": torch.tensor([r["x"] for r in batch]),
            "labels": torch.tensor([r["band"] for r in batch]),
        }

    return Task(
        name="houses",
        kind=CLASSIFICATION,
        examples=data,
        collate=collate,
        group_key="street",
        build_model=lambda: nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 3)),
        class_names=["low", "mid", "high"],
    )
