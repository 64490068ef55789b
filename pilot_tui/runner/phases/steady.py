"""`steady`: updates timed until their mean is known to the declared precision, or the timing
budget ends (`timing/steady.py`): the step time every plan is built from."""

from __future__ import annotations

import time

import torch

from ...analysis.checks import Check
from ...analysis.mfu import mfu
from ...core.events import PhaseProgress
from ...core.steps import Step
from ...core.verdict import PASS
from ..context import SAY_AFTER_S, RunContext
from ..processes import template
from .base import Outcome, PhaseRun, before_step, check, phase

# Longer than any import seen (6.8 s with TRL on 2 cores); past it the timing goes on regardless.
TEMPLATE_WAIT_S = 60.0


@before_step
def template_settled(ctx: RunContext, step: Step) -> None:
    """Timed updates never share the CPU with the template process's imports (processes/template.py);
    a wait past `SAY_AFTER_S` says so on the step's line, each second."""
    tmpl = template.current()
    if step.phase != "steady" or tmpl is None or tmpl.ready():
        return
    t0 = time.monotonic()
    while not tmpl.wait_ready(1.0):
        waited = time.monotonic() - t0
        if not tmpl.alive() or waited > TEMPLATE_WAIT_S:
            return
        if waited >= SAY_AFTER_S:
            message = f"waiting for the template process's imports before timing ({waited:.0f} s)"
            ctx.emit(PhaseProgress(step=step.key, done=0, total=1, message=message))


@phase("steady")
def steady(ctx: RunContext, run: PhaseRun) -> Outcome:
    return ctx.training.as_variant(ctx, run, lambda: ctx.training.steady(ctx, run))


@check(on="steady")
def model_flops_utilisation(ctx: RunContext, run: PhaseRun, outcome: Outcome) -> Check | None:
    """The timed step's model FLOPs per second against the GPU's dense peak (a figure, no verdict:
    a small model is far from the band a large one reaches)."""
    model = ctx.training.model(ctx, run.step.variant)
    tokens = outcome.details.get("tokens_per_s")
    if model is None or not isinstance(tokens, int | float):
        return None
    params = list(model.parameters())
    total = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    cuda = ctx.device.type == "cuda"
    name = torch.cuda.get_device_name(ctx.device) if cuda else None
    precision = str(run.params.get("precision") or outcome.params.get("precision") or "fp32")
    tf32 = cuda and torch.get_float32_matmul_precision() != "highest"
    found = mfu(float(tokens), total, trainable, name, precision, tf32)
    outcome.details["mfu"] = found
    if found.get("mfu") is None:
        return None
    return Check(
        "mfu",
        PASS,
        f"MFU {found['mfu']:.1%} of {found['peak']}; expected band {found['expected']}",
    )
