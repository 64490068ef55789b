"""The numerics A/B's probe for a captured trainer: its model as `compute_loss` calls it (the
accelerator's autocast wrapper included), one batch of its own training rows through its own
collator, and the same loss with that wrapper taken off (checks/numerics.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from ...checks.numerics import Batch, Probe
from . import loop


@contextlib.contextmanager
def without_autocast(model: torch.nn.Module) -> Iterator[None]:
    """accelerate wraps a mixed-precision model's forward in autocast and keeps the original as
    `_original_forward`: the plain side calls that one."""
    original = getattr(model, "_original_forward", None)
    if original is None:
        yield
        return
    wrapped = model.forward
    model.forward = original
    try:
        yield
    finally:
        model.forward = wrapped


def trainer_probe(adapter: Any) -> Probe | None:
    trainer = adapter.trainer
    train = adapter.train
    if len(train) == 0:
        return None
    n = max(1, min(int(trainer.args.per_device_train_batch_size), len(train)))
    batch = trainer._prepare_inputs(dict(train.collate_fn([train.dataset[i] for i in range(n)])))
    model = loop.unwrapped(trainer)

    def loss(m: torch.nn.Module, b: Batch) -> torch.Tensor:
        with trainer.compute_loss_context_manager():
            return trainer.compute_loss(m, dict(b)).float()  # compute_loss may pop the labels

    def plain(m: torch.nn.Module, b: Batch) -> torch.Tensor:
        with without_autocast(m):
            return trainer.compute_loss(m, dict(b)).float()

    return Probe(model, batch, loss, plain, loop.compute_precision(trainer))
