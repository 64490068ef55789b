"""Whether an optimizer's updates survive the weights' precision (R26): bf16 or fp16 weights stepped
without fp32 master copies lose every change smaller than half the spacing between two of their
values, and at a fine-tuning learning rate most changes are.

Measured on the optimizer's own state after its first update, at the run's learning rate (its
schedule's peak, not the first warm-up step's): Adam's step is lr · m̂ / (√v̂ + ε) (plus decoupled
weight decay), and an element keeps its value when that step is below half its spacing. No copy
of the weights is held; parameters whose optimizer keeps no Adam moments are left out, said.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

HALF = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class RoundedAway:
    """The half-precision parameters' elements whose update rounds away, and what was read."""

    elements: int  # half-precision trainable elements with Adam moments
    rounded: int  # of them, those whose step at the run's LR is below half their spacing
    lr: float
    dtypes: dict[str, int]  # parameter dtype -> elements
    state_dtypes: list[str]
    unchecked: int  # half-precision elements without Adam moments (another optimizer)

    @property
    def share(self) -> float:
        return self.rounded / self.elements if self.elements else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "half_precision_elements": self.elements,
            "rounded_away": self.rounded,
            "rounded_away_share": round(self.share, 4),
            "lr": self.lr,
            "parameter_dtypes": self.dtypes,
            "optimizer_state_dtypes": self.state_dtypes,
            "unchecked_elements": self.unchecked,
        }


def _inner(optimizer: Any) -> torch.optim.Optimizer:
    return getattr(optimizer, "optimizer", optimizer)  # accelerate wraps the trainer's


@torch.no_grad()
def rounded_away(optimizer: Any) -> RoundedAway:
    """After the optimizer's first step: its half-precision parameters' elements whose step at the
    group's LR (`initial_lr`, the schedule's peak, where a scheduler set it) rounds away."""
    opt = _inner(optimizer)
    elements = rounded = unchecked = 0
    dtypes: dict[str, int] = {}
    states: set[str] = set()
    lr_seen = 0.0
    for group in opt.param_groups:
        lr = float(group.get("initial_lr", group.get("lr", 0.0)))
        betas, eps = group.get("betas"), group.get("eps", 1e-8)
        # Adam's step only: another optimizer's (Adafactor's pair of eps, SGD's none) is not read.
        adam = isinstance(betas, tuple | list) and len(betas) == 2 and isinstance(eps, int | float)
        for p in group["params"]:
            if not p.requires_grad:
                continue
            name = str(p.dtype).removeprefix("torch.")
            dtypes[name] = dtypes.get(name, 0) + p.numel()
            if p.dtype not in HALF:
                continue
            state = opt.state.get(p, {})
            states.update(str(v.dtype).removeprefix("torch.") for v in state.values() if torch.is_tensor(v))
            if not adam or "exp_avg" not in state or "exp_avg_sq" not in state:
                unchecked += p.numel()
                continue
            (beta1, beta2), decay = betas, float(group.get("weight_decay", 0.0))
            step = float(state.get("step", 1))
            m = state["exp_avg"].float() / (1 - beta1**step)
            v = state["exp_avg_sq"].float() / (1 - beta2**step)
            change = lr * (m / (v.sqrt() + eps) + decay * p.float())
            spacing = (torch.nextafter(p, torch.full_like(p, float("inf"))) - p).float()
            rounded += int((change.abs() < spacing / 2).sum())
            elements += p.numel()
            lr_seen = lr
    return RoundedAway(elements, rounded, lr_seen, dtypes, sorted(states), unchecked)
