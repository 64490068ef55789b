"""`load`: the weights the run starts from, as its owner builds them. Never the only gate (R5).

The pilot's loop builds the task's model; a captured trainer's model is the script's own, built
before its `train()`. Either way the weights are judged here, the same way: finite, counted,
trainable or frozen.
"""

from __future__ import annotations

import torch

from ..context import RunContext
from ..memory.probes import tensor_mb
from .base import Outcome, PhaseFailure, PhaseRun, phase


@phase("load")
def load(ctx: RunContext, run: PhaseRun) -> Outcome:
    loaded = ctx.training.load(ctx, run)
    model = loaded.model
    params = list(model.parameters())
    bad = [name for name, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise PhaseFailure(f"non-finite weights {loaded.built} {', '.join(bad[:5])}")
    total = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    weights = {
        "parameters": total,
        "trainable_parameters": trainable,
        "weights_mb": round(tensor_mb(params), 3),
        "dtype": str(params[0].dtype).removeprefix("torch.") if params else "",
        "model": type(model).__name__,
        "trainable": f"{trainable:,} of {total:,} parameters trainable",
    }
    return Outcome(reason=loaded.reason, details=loaded.details | weights, duration_s=loaded.duration_s)
