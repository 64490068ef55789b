"""`overfit`: can the loop learn a tiny subset? A mechanics check, not a generalisation claim (R3).

A fresh model (same seed as every other run) trains on the first `overfit.examples` training
examples, the whole subset in every update, for at most `overfit.max_steps` updates. It passes
when the loss falls below `overfit.loss_below` and the argmax recovers at least `overfit.recover`
of the supervised targets. The control's training state and the global RNG are left as found,
so the later phases measure the same thing whether this phase ran or not.
"""

from __future__ import annotations

import gc
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from ....core.verdict import FAIL
from ....tasks.contract import CAUSAL_LM, Batch, Task
from ...checks import objective
from ...checks.achievable import achievable, still_improving
from ...context import Outcome, PhaseFailure, PhaseRun, RunContext, finite
from ...loop.training import autocast, build_state, collate, train_update

# (expected, predicted) pairs kept in the row.
PAIRS = 4
# Longest loss curve kept as is; longer ones are thinned evenly (the last point always kept).
CURVE_POINTS = 500
NO_RENTAL = "a long rental will not fix this"


@dataclass
class Measure:
    """The subset evaluated in eval mode: mean loss per target, argmax hits, pairs."""

    loss: float
    hits: int
    targets: int
    pairs: list[dict[str, Any]]

    @property
    def recovered(self) -> float:
        return self.hits / self.targets if self.targets else 0.0


def _save_rng(device: torch.device) -> tuple[Any, ...]:
    cuda = torch.cuda.get_rng_state_all() if device.type == "cuda" else None
    return torch.get_rng_state(), random.getstate(), cuda


def _restore_rng(saved: tuple[Any, ...]) -> None:
    cpu, py, cuda = saved
    torch.set_rng_state(cpu)
    random.setstate(py)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


def _decode(task: Task, ids: Sequence[int]) -> str:
    if task.decode_token is None:
        return " ".join(str(i) for i in ids)
    return "".join(task.decode_token(int(i)) for i in ids)


def _name(task: Task, k: int) -> str:
    names = list(task.class_names or [])
    return f"{k} {names[k]}" if 0 <= k < len(names) else str(k)


def _pairs(task: Task, logits: torch.Tensor, batch: Batch, ids: Sequence[str]) -> list[dict[str, Any]]:
    """Per example: what the labels say and what the argmax says, decoded."""
    out = []
    if task.kind == CAUSAL_LM:
        labels = batch["labels"][:, 1:].cpu()
        predicted = logits[:, :-1].argmax(-1).cpu()
        for r, example in enumerate(ids):
            keep = labels[r] != task.ignore_index
            want, got = labels[r][keep].tolist(), predicted[r][keep].tolist()
            out.append(
                {
                    "id": example,
                    "expected": _decode(task, want),
                    "predicted": _decode(task, got),
                    "ok": want == got,
                }
            )
    else:
        # int: a BCE head's labels are floats (0.0 / 1.0) and name a class all the same.
        labels = [int(x) for x in batch["labels"].reshape(-1).cpu().tolist()]
        predicted = objective.predict(task, logits).reshape(-1).cpu().tolist()
        for r, example in enumerate(ids):
            out.append(
                {
                    "id": example,
                    "expected": _name(task, labels[r]),
                    "predicted": _name(task, predicted[r]),
                    "ok": labels[r] == predicted[r],
                }
            )
    return out


@torch.no_grad()
def measure(
    task: Task, model: torch.nn.Module, batches: list[tuple[list[str], Batch]], precision: str
) -> Measure:
    model.eval()
    total, hits, targets, pairs = 0.0, 0, 0, []
    for ids, batch in batches:
        device = batch["labels"].device
        with autocast(device, precision):
            logits = objective.forward(task, model, batch)
            total += float(objective.loss_sum(task, logits, batch))
        h, t = objective.recovered(task, logits, batch)
        hits, targets = hits + h, targets + t
        pairs += _pairs(task, logits.float(), batch, ids)
    # Wrong predictions first: when the check fails, the pairs show why.
    pairs.sort(key=lambda p: p["ok"])
    return Measure(total / max(targets, 1), hits, targets, pairs[:PAIRS])


def thin(curve: list[float], points: int = CURVE_POINTS) -> list[float]:
    if len(curve) <= points:
        return curve
    step = len(curve) / (points - 1)
    return [curve[int(k * step)] for k in range(points - 1)] + [curve[-1]]


def overfit(ctx: RunContext, run: PhaseRun) -> Outcome:
    spec, task = ctx.spec.overfit, ctx.task
    cfg = ctx.config(run.step.variant, run.overrides)
    n = int(run.overrides.get("overfit_examples") or spec.examples)
    max_steps = int(run.overrides.get("overfit_max_steps") or spec.max_steps)
    lr = float(run.overrides.get("overfit_lr") or spec.lr)
    subset = list(ctx.splits["train"][:n])
    # The microbatch the campaign will train with, and accumulation over the whole
    # subset: every update sees every example of the subset, in the same order.
    micro = max(1, min(cfg.microbatch, len(subset)))
    chunks = [subset[i : i + micro] for i in range(0, len(subset), micro)]
    config = replace(
        cfg,
        variant="overfit",
        microbatch=micro,
        accumulation=len(chunks),
        lr=lr,
        total_updates=max_steps,
        notes=(),
    )
    params = {
        "overfit_examples": len(subset),
        "overfit_max_steps": max_steps,
        "overfit_lr": lr,
        "loss_below": spec.loss_below,
        "recover": spec.recover,
    }
    run.current_input = {"examples": len(subset), "microbatch": micro, "max_length": config.max_length}
    details: dict[str, Any] = {
        "examples": len(subset),
        "example_ids": [str(task.examples[i].get("id", i)) for i in subset],
        "max_steps": max_steps,
        "lr": lr,
        "loss_below": spec.loss_below,
        "recover": spec.recover,
        "schedule": "constant, no warmup, no weight decay",
    }
    saved = _save_rng(ctx.device)
    state = None
    try:
        state = build_state(
            task,
            config,
            subset,
            ctx.device,
            weight_decay=0.0,
            warmup=0,
            schedule="constant",
            drop_last=False,
            data_seed=ctx.spec.split.seed,
        )
        batches = [
            (
                [str(task.examples[i].get("id", i)) for i in chunk],
                collate(task, [task.examples[i] for i in chunk], config.max_length, ctx.device),
            )
            for chunk in chunks
        ]
        targets = sum(objective.supervised_count(task, b) for _, b in batches)
        details["targets"] = targets
        # What the subset allows: identical contexts with different labels cap recovery and loss.
        possible = achievable(task, [b for _, b in batches])
        need_recovery = spec.recover * possible.recovery
        need_loss = spec.loss_below + possible.min_loss
        details |= possible.as_dict() | {"recover_needed": round(need_recovery, 6)}
        if targets == 0:
            raise PhaseFailure(
                f"the {len(subset)} examples of the tiny subset have no supervised target: there is "
                f"nothing to learn; {NO_RENTAL}",
                details,
            )
        curve: list[float] = []
        skipped = 0
        reached = False
        for step in range(1, max_steps + 1):
            ctx.check_cancel()
            run.current_input["step"] = step
            stats = train_update(state, task, ctx.device, ctx.spec.optim.grad_clip, chunks)
            loss, grad_norm = float(stats.loss), float(stats.grad_norm)
            curve.append(round(loss, 6) if finite(loss) else loss)
            ctx.progress(run.step.key, step, max_steps, loss if finite(loss) else None, "overfit")
            if not finite(loss) or (not finite(grad_norm) and config.precision != "fp16"):
                what = "loss" if not finite(loss) else "gradient norm"
                details |= {
                    "steps": step,
                    "loss_curve": thin([c for c in curve if finite(c)]),
                    "stopped": "non_finite",
                }
                raise PhaseFailure(
                    f"non-finite {what} at overfit step {step} (loss {loss:.4g}, grad norm {grad_norm:.4g}) "
                    f"on {len(subset)} examples: the training mechanics are broken; {NO_RENTAL}",
                    details,
                )
            if not finite(grad_norm):
                skipped += 1  # fp16: the gradient scaler skips this step and lowers its scale
            if loss < need_loss:
                m = measure(task, state.model, batches, config.precision)
                if m.loss < need_loss and m.recovered >= need_recovery:
                    reached = True
                    break
        final = measure(task, state.model, batches, config.precision)
        # The bar ends full even when the subset was learnt before max_steps.
        ctx.progress(run.step.key, step, step, curve[-1], "overfit")
    finally:
        _restore_rng(saved)
        del state
        gc.collect()
        if ctx.device.type == "cuda":
            torch.cuda.empty_cache()
    details |= {
        "steps": step,
        "stopped": "reached" if reached else "max_steps",
        "loss_curve": thin(curve),
        "first_loss": curve[0],
        "final_loss": round(final.loss, 6),
        "recovered": round(final.recovered, 6),
        "hits": final.hits,
        "pairs": final.pairs,
    }
    if skipped:
        details["fp16_skipped_steps"] = skipped
    unit = "tokens" if task.kind == CAUSAL_LM else "labels"
    got = (
        f"loss {final.loss:.4f} and argmax recovers {final.hits}/{final.targets} supervised {unit} "
        f"({100 * final.recovered:.1f}%) after {step} steps on {len(subset)} training examples"
    )
    missed = []
    if not final.loss < need_loss:
        missed.append(f"loss < {need_loss:.4g}")
    if final.recovered < need_recovery:
        missed.append(f"recovery ≥ {100 * need_recovery:.4g}%")
    if possible.ambiguous:
        got += (
            f" (at most {100 * possible.recovery:.1f}% recoverable: {possible.ambiguous} targets share "
            "their whole context with a different label)"
        )
    if missed:
        improving = not reached and still_improving(curve)
        details["still_improving"] = improving
        hint = (
            "the loss was still improving at max_steps — raise overfit.max_steps (or overfit.lr) before "
            f"concluding (if the loop cannot learn a tiny subset, {NO_RENTAL})"
            if improving
            else f"the loop cannot learn a tiny subset, so {NO_RENTAL} — check the labels, the loss and overfit.lr first"
        )
        return Outcome(FAIL, f"{got}, short of {' and '.join(missed)}: {hint}", details, params)
    return Outcome(details=details, params=params, reason=got)
