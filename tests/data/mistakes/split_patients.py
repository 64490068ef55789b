"""Predict a lab flag from three measurements. Each row is a visit; each patient has several
visits. The campaign groups by the visit (`group_key = "visit_id"`), but the unit of leakage is
the patient: the same patient is in train and in validation."""

import random

import torch
from torch import nn

from pilot_tui.tasks.contract import CLASSIFICATION, Task


def make_task():
    rng = random.Random(7)
    data = []
    for p in range(30):
        base = [rng.uniform(0, 1) for _ in range(3)]
        for v in range(4):
            data.append(
                {
                    "id": f"p{p}v{v}",
                    "visit_id": f"V{p * 4 + v:03d}",
                    "patient_id": f"P{p:03d}",
                    "values": [b + rng.gauss(0, 0.01) for b in base],
                    "flag": int(base[0] > 0.5),
                    "flag_name": "high" if base[0] > 0.5 else "normal",
                }
            )

    def collate(batch, max_length):
        return {
            "features": torch.tensor([r["values"] for r in batch]),
            "labels": torch.tensor([r["flag"] for r in batch]),
        }

    return Task(
        name="labs",
        kind=CLASSIFICATION,
        examples=data,
        collate=collate,
        group_key="visit_id",
        build_model=lambda: nn.Linear(3, 2),
        class_names=["normal", "high"],
    )
