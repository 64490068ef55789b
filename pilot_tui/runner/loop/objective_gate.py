"""The objective checks (`objective_checks`) run on the pilot's own loop: the task's collate,
forward and loss, normalised as `train_update` normalises them (R9, R26)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ...tasks.contract import CAUSAL_LM, Batch, Task
from ..checks import objective, objective_checks
from ..distributed import state as dist_state
from .training import TrainState, autocast, to_device


def _compute(task: Task, model: torch.nn.Module, device: torch.device, precision: str):
    """One update over host batches exactly as `train_update` takes it (sum of the task's loss over
    every microbatch, divided once by the supervised targets of the whole update), minus the step."""

    def compute(batches: Sequence[Batch]) -> torch.Tensor:
        denom = max(sum(objective.supervised_count(task, b) for b in batches), 1)
        total = torch.zeros((), dtype=torch.float64)
        for host in batches:
            batch = to_device(host, device)
            with autocast(device, precision):
                logits = objective.forward(task, model, batch)
                part = objective.loss_sum(task, logits, batch)
            (part / denom).backward()
            total += float(part.detach())
        return total / denom

    return compute


def accumulation(
    state: TrainState, task: Task, micro: list[list[int]], device: torch.device
) -> dict[str, Any]:
    """The first update's examples as (m, a) against (1, m·a), from the state before it, in eval
    mode (dropout would draw differently for the two groupings) and with every random stream left
    as found. Under torchrun each rank's gradient would be averaged in the backward: it runs in
    the single-process pilot only."""
    cfg = state.config
    if dist_state.world() > 1:
        return {"ran": False, "note": "checked in the single-process pilot (a rank's backward all-reduces)"}
    examples = [i for m in micro for i in m]
    wide_ids, narrow_ids = objective_checks.groupings(examples, cfg.microbatch, cfg.accumulation)
    if len(narrow_ids) < 2:
        return {"ran": False, "note": "one example per update: nothing to regroup"}
    model = state.model
    params = [p for p in model.parameters() if p.requires_grad]
    was_training = model.training
    with objective_checks.rng_untouched([device]):
        wide = [task.collate([task.examples[i] for i in ids], cfg.max_length) for ids in wide_ids]
        narrow = [task.collate([task.examples[i] for i in ids], cfg.max_length) for ids in narrow_ids]
        lengths = [objective.supervised_count(task, b) for b in narrow]
        model.eval()
        try:
            result = objective_checks.compare_accumulation(
                _compute(task, model, device, cfg.precision),
                params,
                wide,
                narrow,
                lengths=lengths,
                tolerance=objective_checks.ACCUMULATION_RTOL.get(cfg.precision, 3e-2),
            )
        finally:
            model.train(was_training)
            for p in params:
                p.grad = None
    return {"ran": True, **result.as_dict(), "message": result.message(), "_result": result}


@torch.no_grad()
def reference(state: TrainState, task: Task, micro: list[list[int]], device: torch.device) -> dict[str, Any]:
    """The task's own `loss` on the first microbatch against a masked cross-entropy of the same
    logits and labels; nothing to compare without a task loss."""
    if task.loss is None:
        return {"ran": False, "note": "the task uses the pilot's cross-entropy"}
    cfg = state.config
    model = state.model
    was_training = model.training
    with objective_checks.rng_untouched([device]):
        batch = to_device(task.collate([task.examples[i] for i in micro[0]], cfg.max_length), device)
        model.eval()
        try:
            with autocast(device, cfg.precision):
                logits = objective.forward(task, model, batch)
                own = objective.loss_sum(task, logits, batch)
        finally:
            model.train(was_training)
    found = objective_checks.reference_loss(
        own, logits, batch["labels"], task.ignore_index, shift=task.kind == CAUSAL_LM
    )
    if found is None:
        return {
            "ran": False,
            "note": "these logits and labels make no cross-entropy (a one-logit head, soft labels)",
        }
    return {"ran": True, **found.as_dict(), "message": found.message(), "_result": found}


def public(found: dict[str, Any]) -> dict[str, Any]:
    """A check's figures for the row (without the result object)."""
    return {k: v for k, v in found.items() if not k.startswith("_")}
