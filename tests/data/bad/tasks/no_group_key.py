"""A task file whose examples hold `patient` while the task declares the group key `group`."""

import torch

from pilot_tui.tasks.contract import CLASSIFICATION, Task


def make_task():
    examples = [{"patient": f"p{i // 4}", "features": [float(i), 1.0], "label": i % 2} for i in range(40)]
    return Task(
        name="no-group-key",
        kind=CLASSIFICATION,
        examples=examples,
        build_model=lambda: torch.nn.Linear(2, 2),
        collate=lambda batch, max_length: {
            "features": torch.tensor([ex["features"] for ex in batch]),
            "labels": torch.tensor([ex["label"] for ex in batch]),
        },
        group_key="group",
    )
