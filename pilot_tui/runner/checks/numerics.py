"""Numerics A/B: one batch through the configuration the run uses against a plain reference of the
same model and weights (R26).

A fused kernel, `torch.compile` or another attention implementation can give wrong gradients with
no error and a loss that still falls (Liger-Kernel #968, #1298: "the failure is silent"). The run's
side is the model as the run calls it — its attention implementation, compiled or not, under the
run's autocast. The reference is the same module and weights, uncompiled, without autocast, with
Hugging Face's "eager" attention where the model has a choice. Both run in evaluation mode (no
dropout draws) inside a forked RNG; gradients come from `torch.autograd.grad`, so the training
state's own `.grad` is untouched. Compared: the loss, and per group of parameters (the module
path up to its layer index) the gradients' cosine and relative error. A difference beyond what the
precision explains fails, and a third pass — the reference with the run's attention — says
whether the attention implementation is the component that differs.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ...analysis.checks import Check
from ...core.verdict import FAIL, PASS

Batch = dict[str, torch.Tensor]
LossFn = Callable[[torch.nn.Module, Batch], torch.Tensor]
EAGER = "eager"
# What each precision explains between the run's side and the reference (measured on the tiny
# models of the suite: fp32 sdpa vs eager agree to ~1e-6, bf16 autocast to ~1e-2 in the loss).
TOLERANCE = {"fp32": (1e-4, 0.9999), "bf16": (3e-2, 0.99), "fp16": (1e-2, 0.995)}
_LAYER = re.compile(r"^(.*?\.\d+)\.")


@dataclass
class Probe:
    """What a training hands the A/B: its module, one batch, its loss with and without autocast."""

    model: torch.nn.Module
    batch: Batch
    run_loss: LossFn  # as the run computes it (its autocast)
    plain_loss: LossFn  # the same loss without autocast
    precision: str


@dataclass
class Side:
    loss: float
    grads: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class Comparison:
    loss_rel: float
    worst_group: str
    worst_cosine: float
    worst_rel: float
    groups: dict[str, dict[str, float]]

    def within(self, precision: str) -> bool:
        loss_tol, cos_tol = TOLERANCE.get(precision, TOLERANCE["fp32"])
        return self.loss_rel <= loss_tol and self.worst_cosine >= cos_tol


def inner_module(model: torch.nn.Module) -> torch.nn.Module:
    """The module under `torch.compile` (and a DDP wrapper): the eager code the run compiled."""
    for _ in range(3):
        model = getattr(model, "_orig_mod", None) or getattr(model, "module", None) or model
    return model


def attention_of(model: torch.nn.Module) -> str | None:
    config = getattr(model, "config", None)
    found = getattr(config, "_attn_implementation", None) if config is not None else None
    return str(found) if found else None


@contextlib.contextmanager
def attention(model: torch.nn.Module, name: str | None) -> Iterator[None]:
    """The model's attention implementation set to `name` for the block, put back after."""
    was = attention_of(model)
    if name is None or was is None or name == was:
        yield
        return
    setter = getattr(model, "set_attn_implementation", None)
    try:
        if setter is not None:
            setter(name)
        else:
            model.config._attn_implementation = name  # type: ignore[union-attr]
        yield
    finally:
        if setter is not None:
            setter(was)
        else:
            model.config._attn_implementation = was  # type: ignore[union-attr]


def group_of(name: str) -> str:
    """A parameter's group: its path up to the layer index (`model.layers.3`), else its module."""
    found = _LAYER.match(name)
    return found.group(1) if found else name.rsplit(".", 1)[0] or name


def _side(
    model: torch.nn.Module, params: dict[str, torch.nn.Parameter], loss_fn: LossFn, batch: Batch
) -> Side:
    loss = loss_fn(model, batch)
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    out = {n: g.detach().float() for n, g in zip(params, grads, strict=True) if g is not None}
    return Side(float(loss.detach().float()), out)


def compare(run: Side, ref: Side) -> Comparison:
    by_group: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    for name, g_ref in ref.grads.items():
        g_run = run.grads.get(name, torch.zeros_like(g_ref))
        by_group.setdefault(group_of(name), []).append((g_run.reshape(-1), g_ref.reshape(-1)))
    groups: dict[str, dict[str, float]] = {}
    for group, pairs in by_group.items():
        a = torch.cat([p[0] for p in pairs])
        b = torch.cat([p[1] for p in pairs])
        nb = float(b.norm())
        if nb == 0.0:
            continue  # no gradient reaches this group on this batch: nothing to compare
        cos = float(torch.nn.functional.cosine_similarity(a, b, dim=0))
        groups[group] = {"cosine": round(cos, 6), "relative_error": round(float((a - b).norm()) / nb, 6)}
    worst = min(
        groups.items(), key=lambda kv: kv[1]["cosine"], default=("", {"cosine": 1.0, "relative_error": 0.0})
    )
    loss_rel = abs(run.loss - ref.loss) / max(abs(ref.loss), 1e-12)
    return Comparison(
        loss_rel if math.isfinite(loss_rel) else math.inf,
        worst[0],
        worst[1]["cosine"],
        worst[1]["relative_error"],
        groups,
    )


def run_ab(probe: Probe) -> dict[str, Any]:
    """The A/B's figures, its verdict (`within`), and the component that differs when it does not."""
    inner = inner_module(probe.model)
    compiled = inner is not probe.model and hasattr(probe.model, "_orig_mod")
    params = {n: p for n, p in inner.named_parameters() if p.requires_grad}
    run_attention = attention_of(inner)
    was_training = inner.training
    devices = [probe.batch[next(iter(probe.batch))].device]
    cuda = [d for d in devices if d.type == "cuda"]
    inner.eval()  # no dropout draw: both sides see the same network
    try:
        with torch.random.fork_rng(devices=cuda):
            run = _side(probe.model, params, probe.run_loss, probe.batch)
            with attention(inner, EAGER):
                ref = _side(inner, params, probe.plain_loss, probe.batch)
            cmp = compare(run, ref)
            # A batch whose loss is not finite compares nothing (the finiteness checks say why).
            compared = math.isfinite(run.loss) and math.isfinite(ref.loss)
            within = cmp.within(probe.precision) or not compared
            component = ""
            if not within:
                # The reference again, with only the run's attention implementation changed.
                alone = compare(_side(inner, params, probe.plain_loss, probe.batch), ref)
                if run_attention not in (None, EAGER) and not alone.within("fp32"):
                    component = f"the attention implementation {run_attention!r} (against {EAGER!r})"
                elif compiled:
                    component = "torch.compile (against the same module uncompiled)"
                elif probe.precision != "fp32":
                    component = f"{probe.precision} autocast (beyond what {probe.precision} explains)"
                else:
                    component = "the model's own kernels (a fused or custom op)"
    finally:
        inner.train(was_training)
    loss_tol, cos_tol = TOLERANCE.get(probe.precision, TOLERANCE["fp32"])
    return {
        "within": within,
        "compared": compared,
        "component": component,
        "attention": run_attention or "",
        "compiled": compiled,
        "precision": probe.precision,
        "loss_run": run.loss,
        "loss_reference": ref.loss,
        "loss_relative_difference": round(cmp.loss_rel, 8),
        "worst_group": cmp.worst_group,
        "worst_cosine": cmp.worst_cosine,
        "worst_relative_error": cmp.worst_rel,
        "tolerance": {"loss_relative": loss_tol, "cosine": cos_tol},
        "groups": len(cmp.groups),
    }


def describe(found: dict[str, Any]) -> Check:
    """The A/B as a check: its figures, the tolerance its precision explains, the component."""
    setup = ", ".join(
        part
        for part in (
            f"attention {found['attention']!r}" if found["attention"] else "",
            "compiled" if found["compiled"] else "",
            f"{found['precision']} autocast" if found["precision"] != "fp32" else "fp32",
        )
        if part
    )
    figures = (
        f"loss {found['loss_run']:.6g} vs {found['loss_reference']:.6g} "
        f"({found['loss_relative_difference']:.2e} apart), gradients' lowest cosine "
        f"{found['worst_cosine']:.6f} ({found['worst_group'] or 'no group'})"
    )
    tol = found["tolerance"]
    explained = (
        f"what {found['precision']} explains (loss {tol['loss_relative']:g}, cosine {tol['cosine']:g})"
    )
    if not found.get("compared", True):
        return Check("numerics", PASS, f"not compared ({setup}): the probe batch's loss is not finite")
    if found["within"]:
        return Check(
            "numerics",
            PASS,
            f"the run's configuration ({setup}) agrees with a plain reference of the same weights: "
            f"{figures}, within {explained}",
        )
    return Check(
        "numerics",
        FAIL,
        f"one batch through the run's configuration ({setup}) differs from the same weights run plainly "
        f"(eager attention, uncompiled, fp32): {figures}, beyond {explained}; the component that "
        f"differs: {found['component']}",
    )
