"""The demo task with a simulated *sticky* CUDA error, for the CPU test of the poisoned-context path.

On a GPU, a device-side assert (a label past the vocabulary, say) fails the forward, and from
then on every CUDA call of the process raises the same error — `torch.cuda.synchronize()` first.
This task reproduces exactly that on the CPU: the first training forward raises the CUDA error
text, and from that moment `pilot_tui.runner.memory.probes.synchronize` (what the runner calls to wait
for the device) raises it too, in this process only. It happens once per campaign (a marker file
named by the `marker` option), so a step run in a *new* runner finds a healthy process.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from pilot_tui.runner.memory import probes
from pilot_tui.tasks.contract import Task
from pilot_tui.tasks.demo_instruct import make_task as demo_task

ERROR = (
    "CUDA error: device-side assert triggered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call."
)


def _poison_this_process() -> None:
    def synchronize(device) -> None:
        raise RuntimeError(ERROR)

    probes.synchronize = synchronize


def make_task(marker: str, **options) -> Task:
    task = demo_task(**options)
    build = task.build_model
    marker_path = Path(marker)

    def build_model():
        model = build()

        def assert_on_training_forward(module, args) -> None:
            if module.training and not marker_path.exists():
                marker_path.write_text(str(os.getpid()))
                _poison_this_process()
                raise RuntimeError(ERROR)

        model.register_forward_pre_hook(assert_on_training_forward)
        return model

    return dataclasses.replace(task, build_model=build_model)
