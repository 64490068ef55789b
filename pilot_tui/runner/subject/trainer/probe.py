"""A TrainerCallback that times each update and reads what the trainer logs; saves where asked."""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Callable
from typing import Any

import torch
from transformers import TrainerCallback

LOGGED = ("loss", "grad_norm", "learning_rate")


def parameter_digest(model: torch.nn.Module) -> str:
    """sha256 over every parameter's bytes, by name: equal digests are bitwise-equal weights."""
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters(), key=lambda x: x[0]):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class StepProbe(TrainerCallback):
    """Per update: the time its step ended, the logged loss / grad norm / LR, optionally a digest
    of the weights after it; `save_at` steps are saved by the trainer's own checkpoint code."""

    def __init__(
        self,
        save_at: tuple[int, ...] = (),
        digest: bool = False,
        on_step: Callable[[int, int, float | None], None] | None = None,
    ) -> None:
        self.save_at = set(save_at)
        self.digest = digest
        # Called after every logged step with (step, max_steps, loss): the phase's progress and
        # its cancel / deadline check (raising there unwinds the trainer's loop).
        self.on_step = on_step
        self.rows: dict[int, dict[str, Any]] = {}
        self.ends: list[float] = []
        self.started = 0.0

    def _row(self, step: int) -> dict[str, Any]:
        return self.rows.setdefault(step, {"step": step})

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()  # the host clock would time the launch, not the kernels
        self.ends.append(time.perf_counter())
        row = self._row(state.global_step)
        if self.digest and model is not None:
            row["digest"] = parameter_digest(model)
        if state.global_step in self.save_at:
            control.should_save = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            row = self._row(state.global_step)
            for key in LOGGED:
                if logs.get(key) is not None:
                    row[key] = float(logs[key])
            if self.on_step is not None:
                self.on_step(state.global_step, state.max_steps, row.get("loss"))
        return control

    def step_times(self) -> list[float]:
        """Seconds per update: start to the first step's end, then between consecutive ends."""
        marks = [self.started, *self.ends]
        return [b - a for a, b in itertools.pairwise(marks)]

    def ordered(self) -> list[dict[str, Any]]:
        return [self.rows[k] for k in sorted(self.rows)]
