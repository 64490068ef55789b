"""Built-in demo: classification of generated 2-D shapes' features, with class names.

Each example comes from a `source` (think: one patient, one document); sources hold several
near-identical examples, so the split unit is the source (R4). The generator knows what each
label means, so a declared id -> name mapping that disagrees with the data is caught (R2).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .contract import CLASSIFICATION, Example, Task

CLASS_NAMES = ("circle", "square", "triangle", "star")
N_FEATURES = 8


def generate(n_sources: int, per_source: int, seed: int, noise: float) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    centres = [[rng.uniform(-2, 2) for _ in range(N_FEATURES)] for _ in CLASS_NAMES]
    examples = []
    for s in range(n_sources):
        label = s % len(CLASS_NAMES)
        base = [c + rng.gauss(0, noise) for c in centres[label]]
        for i in range(per_source):
            examples.append(
                {
                    "id": f"s{s:03d}-{i}",
                    "source": f"s{s:03d}",
                    "features": [round(b + rng.gauss(0, noise / 4), 5) for b in base],
                    "label": label,
                    "label_name": CLASS_NAMES[label],
                }
            )
    return examples


def collate(examples: Sequence[Example], max_length: int) -> dict[str, torch.Tensor]:
    del max_length  # fixed-size features: nothing to truncate
    return {
        "features": torch.tensor([ex["features"] for ex in examples], dtype=torch.float32),
        "labels": torch.tensor([ex["label"] for ex in examples], dtype=torch.long),
    }


class MLP(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(N_FEATURES, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, len(CLASS_NAMES)),
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)


def encode_replay(text: str) -> Example:
    """A replay input is written as comma-separated feature values."""
    values = [float(v) for v in text.split(",")]
    if len(values) != N_FEATURES:
        raise ValueError(f"a replay input needs {N_FEATURES} comma-separated numbers, got {len(values)}")
    return {"id": f"control:{text}", "source": "control", "features": values, "label": 0}


# What `make_task` accepts (checked by the loader before it runs).
OPTION_BOUNDS = {
    "n_sources": (1, 200_000),
    "per_source": (1, 1_000),
    "hidden": (1, 65_536),
    "noise": (0, 100),
}


def make_task(
    n_sources: int = 120,
    per_source: int = 4,
    seed: int = 0,
    noise: float = 0.6,
    hidden: int = 64,
    class_names: list[str] | None = None,
) -> Task:
    """`class_names` replaces the task's own names (the generator keeps its meanings), so a
    task that names a class twice or names a class no example has can be piloted."""
    return Task(
        name="demo-classify",
        kind=CLASSIFICATION,
        examples=generate(n_sources, per_source, seed, noise),
        build_model=lambda: MLP(hidden),
        collate=collate,
        group_key="source",
        class_names=tuple(class_names) if class_names is not None else CLASS_NAMES,
        encode_replay=encode_replay,
        label_meaning=lambda ex: str(ex["label_name"]),
    )
