"""`load`: build the model and move its weights to the device. Never the only gate (R5)."""

from __future__ import annotations

import torch

from ..context import RunContext
from .base import Outcome, PhaseFailure, PhaseRun, phase


def tensor_mb(tensors) -> float:
    return sum(t.numel() * t.element_size() for t in tensors) / 2**20


@phase("load")
def load(ctx: RunContext, run: PhaseRun) -> Outcome:
    variant = run.step.variant
    ctx.states.pop(variant, None)  # a load always starts from fresh weights
    state = ctx.state(variant, ctx.config(variant, run.overrides))
    params = list(state.model.parameters())
    bad = [name for name, p in state.model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise PhaseFailure(f"non-finite weights after load in {', '.join(bad[:5])}")
    trainable = sum(p.numel() for p in params if p.requires_grad)
    return Outcome(
        details={
            "parameters": sum(p.numel() for p in params),
            "trainable_parameters": trainable,
            "weights_mb": round(tensor_mb(params), 3),
            "dtype": str(params[0].dtype).removeprefix("torch.") if params else "",
            "model": type(state.model).__name__,
            "trainable": f"{trainable:,} of {sum(p.numel() for p in params):,} parameters trainable",
            "task_notes": list(ctx.task.notes),
        }
    )
