"""What both sides of the resume check observe, and how they are compared (R15).

The same functions run in the runner (the uninterrupted run) and in the fresh process (the
resumed run), so any difference comes from the checkpoint, never from the measuring code.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ...tasks.contract import Task
from ..checks.finiteness import finite_equal, max_finite_diff
from ..distributed import state as dist_state
from .training import TrainState, train_update

# The per-update quantities, in the order a difference is looked for.
STEP_QUANTITIES = (
    ("step", "step counter"),
    ("lr", "learning rate"),
    ("batch", "batch ids"),
    ("loss", "loss"),
)


def observe_update(state: TrainState, task: Task, device: torch.device, grad_clip: float) -> dict[str, Any]:
    """Run one update and say what it did: step, LR used, example ids, loss, data epoch."""
    lr = float(state.optimizer.param_groups[0]["lr"])  # the rate this update is taken with
    micro = state.sampler.next_update()
    stats = train_update(state, task, device, grad_clip, micro)
    return {
        "step": state.step,
        "lr": lr,
        "batch": [int(i) for m in micro for i in m],
        "loss": float(stats.loss),
        "epoch": state.sampler.epoch,
    }


def final_tensors(state: TrainState, by_name: bool = False) -> dict[str, torch.Tensor]:
    """Weights and optimizer moments at the end, flat and named, for safetensors.

    Under a process group the optimizer state is keyed by parameter name (the gathered full
    state dict); `by_name` keys a single process's the same way, so a run at another world size
    compares tensor by tensor with it.
    """
    out = {f"model/{k}": v.detach() for k, v in dist_state.model_state(state.model).items()}
    if by_name and not dist_state.active():
        # torch.distributed.checkpoint (~0.2 s to import): only a sharded optimizer state needs it.
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        optim = get_optimizer_state_dict(state.model, state.optimizer)
    else:
        optim = dist_state.optimizer_state(state.model, state.optimizer)
    for idx, s in optim["state"].items():
        for key, value in s.items():
            if torch.is_tensor(value):
                out[f"optim/{idx}/{key}"] = value.detach().reshape(value.shape)
    return out


def next_draws(device: torch.device) -> tuple[float, dict[str, torch.Tensor]]:
    """The next random draw of every generator a training loop may use."""
    py = random.random()
    tensors = {"draw/torch": torch.rand(4)}
    if device.type == "cuda":
        tensors["draw/cuda"] = torch.rand(4, device=device).cpu()
    return py, tensors


@dataclass
class Comparison:
    """Each check's verdict, and the first difference found (update and quantity)."""

    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    first: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.first is None

    def differ(self, update: int, quantity: str, expected: Any, got: Any, **extra: Any) -> None:
        if self.first is None:
            self.first = {"update": update, "quantity": quantity, "uninterrupted": expected, "resumed": got}
            self.first |= extra

    def reason(self) -> str:
        if self.first is None:
            return ""
        f = self.first
        where = f"at update {f['update']}" if f["update"] else "at the end"
        detail = (
            f.get("note") or f"{_short(f['uninterrupted'])} uninterrupted vs {_short(f['resumed'])} resumed"
        )
        return f"the resumed run differs from the uninterrupted one first {where}: {f['quantity']} ({detail})"


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.9g}"
    if isinstance(value, list) and len(value) > 6:
        return "[" + ", ".join(str(v) for v in value[:6]) + ", …]"
    return str(value)


# The per-tensor relative tolerance used on CUDA when a kernel has no deterministic version and
# the campaign declared none (`resume.tolerance = 0`): atomics reorder float sums, so the runs
# drift by a few ulps per update; a broken resume (schedule, data, state) differs far more.
NONDETERMINISTIC_RTOL = 1e-3
# A resume at another world size (R28): the same global batch, its gradients summed in another
# order; after a few updates float32 weights and Adam moments differ by ~1e-6 relative, a resume
# that lost the schedule, the data position or a shard by orders of magnitude more.
RESHARD_RTOL = 1e-3


def _same_float(a: float, b: float, tol: float) -> bool:
    """Equal (tol 0), or within `tol` relative to the larger magnitude."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b if tol == 0 else abs(a - b) <= tol * max(abs(a), abs(b))


def compare(
    reference: Sequence[Mapping[str, Any]],
    resumed: Sequence[Mapping[str, Any]],
    ref_tensors: Mapping[str, torch.Tensor],
    res_tensors: Mapping[str, torch.Tensor],
    ref_python_draw: float,
    res_python_draw: float,
    tolerance: float,
    draws: bool = True,
) -> Comparison:
    """Compare the n updates after the resume, then the state at the end.

    Step, LR, batch ids and random draws must be identical everywhere; losses, weights and
    moments are compared bitwise when `tolerance` is 0, else per tensor *relative* to that
    tensor's largest magnitude: an absolute figure means nothing across tensors whose scales
    differ by ten orders (a weight ~1e-1, AdamW's `exp_avg_sq` ~1e-10).
    """
    c = Comparison()
    per: dict[str, dict[str, Any]] = {q: {"ok": True, "compared": 0} for q, _ in STEP_QUANTITIES}
    max_loss_diff = 0.0
    for ref, res in zip(reference, resumed, strict=False):
        update = int(ref["step"])
        for key, label in STEP_QUANTITIES:
            a, b = ref[key], res[key]
            per[key]["compared"] += 1
            if key == "loss":
                same = _same_float(a, b, tolerance)
                if not (math.isnan(a) or math.isnan(b)):
                    max_loss_diff = max(max_loss_diff, abs(a - b))
            elif key == "lr":
                same = _same_float(a, b, 0.0)
            else:
                same = a == b
            if not same:
                if per[key]["ok"]:
                    per[key] |= {"ok": False, "first_update": update}
                c.differ(update, label, a, b)
    per["loss"]["max_abs_diff"] = max_loss_diff
    if len(resumed) != len(reference):
        per["step"] |= {"ok": False}
        c.differ(0, "number of updates", len(reference), len(resumed))
    c.checks = {
        "step_counter": per["step"],
        "lr_per_step": per["lr"],
        "batch_ids": per["batch"],
        "loss_per_step": per["loss"],
    }
    final_step = int(reference[-1]["step"]) if reference else 0
    resumed_step = int(resumed[-1]["step"]) if resumed else 0
    c.checks["final_step"] = {
        "ok": final_step == resumed_step,
        "uninterrupted": final_step,
        "resumed": resumed_step,
    }
    if final_step != resumed_step:
        c.differ(final_step, "step counter at the end", final_step, resumed_step)
    for name, prefix in (("weights", "model/"), ("optimizer_moments", "optim/")):
        c.checks[name] = _compare_tensors(c, final_step, name, prefix, ref_tensors, res_tensors, tolerance)
    draw_ok = ref_python_draw == res_python_draw and all(
        torch.equal(ref_tensors[k], res_tensors.get(k, torch.empty(0)))
        for k in ref_tensors
        if k.startswith("draw/")
    )
    if not draws:
        # At another world size the RNG streams are not the same streams (rank 0's restored).
        c.checks["next_random_draw"] = {"ok": True, "not_compared": "another world size"}
        return c
    c.checks["next_random_draw"] = {
        "ok": draw_ok,
        "python": [ref_python_draw, res_python_draw],
        "torch": [ref_tensors["draw/torch"].tolist(), res_tensors["draw/torch"].tolist()],
    }
    if not draw_ok:
        c.differ(final_step, "next random draw", ref_python_draw, res_python_draw)
    return c


def _compare_tensors(
    c: Comparison,
    step: int,
    label: str,
    prefix: str,
    ref: Mapping[str, torch.Tensor],
    res: Mapping[str, torch.Tensor],
    tol: float,
) -> dict[str, Any]:
    names = sorted(k for k in ref if k.startswith(prefix))
    other = sorted(k for k in res if k.startswith(prefix))
    if names != other:
        missing = sorted(set(names) ^ set(other))
        c.differ(step, label.replace("_", " "), len(names), len(other), note=f"tensors differ: {missing[:3]}")
        return {"ok": False, "tensors": len(names), "mismatched_names": missing[:10]}
    worst, worst_name, first_bad, worst_rel = 0.0, "", "", 0.0
    for name in names:
        a, b = ref[name], res[name]
        if a.shape != b.shape or a.dtype != b.dtype:
            first_bad = first_bad or name
            continue
        # NaN never equals NaN: equal where finite and non-finite at the same places is the same.
        same = finite_equal(a, b)
        diff = 0.0 if same else max_finite_diff(a, b) if a.numel() else 0.0
        if not same and diff == 0.0:
            diff = math.inf  # they differ only in where they are NaN or inf
        rel = relative_diff(a, b, diff)
        if diff > worst:
            worst, worst_name = diff, name
        worst_rel = max(worst_rel, rel)
        if not same and (tol == 0 or not rel <= tol):
            first_bad = first_bad or name
    if first_bad:
        c.differ(
            step,
            label.replace("_", " "),
            0.0,
            worst,
            note=(
                f"{first_bad.split('/', 1)[1]} differs, max |Δ| {worst:.3g}, relative {worst_rel:.3g} "
                f"(tolerance {tol:g} relative per tensor)"
            ),
        )
    return {
        "ok": not first_bad,
        "tensors": len(names),
        "max_abs_diff": worst,
        "max_rel_diff": worst_rel,
        "worst": worst_name,
    }


def relative_diff(a: torch.Tensor, b: torch.Tensor, diff: float | None = None) -> float:
    """max|a − b| over max|a|, per tensor (0 for equal tensors, inf when `a` is all zeros)."""
    if diff is None:
        diff = float((a.double() - b.double()).abs().max()) if a.numel() else 0.0
    if diff == 0.0:
        return 0.0
    scale = float(a.double().abs().max()) if a.numel() else 0.0
    return diff / scale if scale > 0 else math.inf
