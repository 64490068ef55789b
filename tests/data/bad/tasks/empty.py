"""A task file whose factory returns a Task with no examples."""

import torch

from pilot_tui.tasks.contract import CLASSIFICATION, Task


def make_task():
    return Task(
        name="empty",
        kind=CLASSIFICATION,
        examples=[],
        build_model=lambda: torch.nn.Linear(2, 2),
        collate=lambda examples, max_length: {},
    )
