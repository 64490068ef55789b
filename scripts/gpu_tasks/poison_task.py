"""The demo task with a *real* device-side assert, for scripts/gpu_check.py (CUDA only).

The first training forward of the campaign indexes a CUDA tensor out of its bounds: the kernel's
assert fires and, as on any real bug of that kind (a label past the vocabulary), the process's
CUDA context is poisoned for good. A marker file makes it happen once per campaign, so the steps
after it, run in a new runner, find a healthy GPU.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import torch

from pilot_tui.tasks.contract import Task
from pilot_tui.tasks.demo_instruct import make_task as demo_task


def make_task(marker: str, **options) -> Task:
    task = demo_task(**options)
    build = task.build_model
    marker_path = Path(marker)

    def build_model():
        model = build()

        def out_of_bounds_on_training_forward(module, args) -> None:
            x = args[0]
            if module.training and x.is_cuda and not marker_path.exists():
                marker_path.write_text(str(os.getpid()))
                small = torch.zeros(3, device=x.device)
                small[torch.full((1,), 10, device=x.device)] += 1  # index 10 of 3: device-side assert

        model.register_forward_pre_hook(out_of_bounds_on_training_forward)
        return model

    return dataclasses.replace(task, build_model=build_model)
