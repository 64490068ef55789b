"""Classify fruit from (weight, sugar, acidity). The class names come from the CSV's
`category` column in the order the rows list them (a pandas `unique()`), while the label ids
come from a sorted encoder (`LabelEncoder`): two orders, one mapping, no error anywhere."""

import random

import torch
from torch import nn

from pilot_tui.tasks.contract import CLASSIFICATION, Task

CENTRES = {
    "lemon": (0.1, 0.2, 0.9),
    "apple": (0.5, 0.6, 0.3),
    "banana": (0.6, 0.9, 0.1),
    "cherry": (0.05, 0.8, 0.4),
}


def rows(seed=0):
    rng = random.Random(seed)
    out = []
    for k in range(64):
        name = list(CENTRES)[k % 4]
        features = [c + rng.gauss(0, 0.03) for c in CENTRES[name]]
        out.append({"id": f"f{k}", "orchard": f"o{k // 4}", "category": name, "features": features})
    return out


def make_task(names_in_data_order=False):
    data = rows()
    encoder = sorted({r["category"] for r in data})  # what LabelEncoder does
    for r in data:
        r["label"] = encoder.index(r["category"])
    names = list(dict.fromkeys(r["category"] for r in data)) if names_in_data_order else encoder

    def collate(batch, max_length):
        return {
            "features": torch.tensor([r["features"] for r in batch]),
            "labels": torch.tensor([r["label"] for r in batch]),
        }

    return Task(
        name="fruit",
        kind=CLASSIFICATION,
        examples=data,
        collate=collate,
        group_key="orchard",
        build_model=lambda: nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 4)),
        class_names=names,
    )
