"""The data gates and `load` on a captured trainer: what the script built, its rows as the loss
sees them, its splits, and a tiny subset learnt through its own `training_step`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import torch

from ....analysis.loss_trend import loss_trend
from ....core.launch import command_changes
from ....core.verdict import FAIL, PASS, WARN
from ....tasks.contract import CAUSAL_LM
from ...checks.inspection import ModelOutput
from ...context import Outcome, PhaseFailure, PhaseRun, RunContext, finite
from ..base import InspectionInput, Loaded, LoopView
from . import loop
from .adapter import completion_labels
from .batches import loader_view
from .captured import INITIAL, adapter_of, trainer_of
from .kinds import MULTI_LABEL, REGRESSION, Kind
from .ranks import require_agreement


def _output_size(model: torch.nn.Module, kind: Kind) -> ModelOutput:
    if kind.task_kind != CAUSAL_LM:  # a classifier's logits: one per class
        return ModelOutput(kind.num_labels or None, how="config.num_labels")
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and getattr(head, "weight", None) is not None:
        return ModelOutput(int(head.weight.shape[0]), how="output embeddings")
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    return (
        ModelOutput(int(size), how="config.vocab_size") if size else ModelOutput(None, "no output size found")
    )


def load(ctx: RunContext, run: PhaseRun) -> Loaded:
    """The script's own model as it built it before `train()`, and what the capture did."""
    trainer, cap = trainer_of(ctx), ctx.memo["trainer_capture"]
    agreement = require_agreement(ctx)  # on several ranks: the same rows everywhere
    model = loop.unwrapped(trainer)
    a = trainer.args
    details = {
        "script": cap["script"],
        "argv": cap["argv"],
        "capture_s": round(cap["seconds"], 3),
        "capture_rss_mb": cap["rss_mb"],
        "what_ran": "everything the script did before train(): model load, tokenisation, packing",
        "trainer": type(trainer).__name__,
        "train_examples": len(adapter_of(ctx).train),
        "eval_examples": adapter_of(ctx).eval_examples(),
        "eval_sets": {split: len(rows) for split, rows in adapter_of(ctx).evals().items()},
        "per_device_train_batch_size": a.per_device_train_batch_size,
        "gradient_accumulation_steps": a.gradient_accumulation_steps,
        "learning_rate": a.learning_rate,
        "lr_scheduler_type": str(getattr(a.lr_scheduler_type, "value", a.lr_scheduler_type)),
        "optim": str(getattr(a.optim, "value", a.optim)),
        "precision": "bf16" if a.bf16 else "fp16" if a.fp16 else "fp32",
        "activation_checkpointing": loop.checkpointing(a),
        "collator": getattr(trainer.data_collator, "__name__", type(trainer.data_collator).__name__),
        "pilot_changed": cap["changes"],
        "versions": cap["versions"],
        # What the trainer itself made of the launch (torchrun's LOCAL_RANK / WORLD_SIZE).
        "trainer_world_size": int(a.world_size),
        "trainer_process_index": int(a.process_index),
        "distributed_type": str(getattr(trainer.accelerator.state.distributed_type, "value", "")),
    } | agreement
    if cap["train_kwargs"]:
        details["train_called_with"] = {k: str(v) for k, v in cap["train_kwargs"].items()}
    task = ctx.spec.task
    details["program"] = task.program
    changed = command_changes(task.given_args, task.args) if task.given_args else []
    if changed:
        # What `init` changed in the command the user gave: said here again, where they look.
        details["command_changed"] = changed
    reason = (
        f"captured {type(trainer).__name__} in {cap['seconds']:.2f} s (everything before train()); "
        f"the pilot changed {len(cap['changes'])} settings"
        + (f"; the command piloted differs from yours: {'; '.join(changed)}" if changed else "")
    )
    return Loaded(model, details, reason, round(cap["seconds"], 4), "after the script built the model:")


def inspection(ctx: RunContext, run: PhaseRun, show: int) -> InspectionInput:
    """The trainer's rows one at a time through its collator, as the shared scan reads them."""
    adapter, trainer = adapter_of(ctx), trainer_of(ctx)
    run.current_input = {"examples": len(adapter.train), "split": "train"}
    return InspectionInput(
        task=adapter.task,
        max_length=0,
        declared_names=[],
        microbatch=1,
        splits={"train": ctx.splits["train"]},
        output=_output_size(loop.unwrapped(trainer), adapter.kind),
    )


def loop_view(ctx: RunContext, show: int) -> LoopView:
    """The batches the trainer's loop gets: one accumulation window, its normaliser."""
    adapter = adapter_of(ctx)
    view = loader_view(trainer_of(ctx), adapter, show)
    details = {
        "examples": view.examples,
        "loader_windows": view.windows,
        "legend": view.legend,
        "examples_scanned": len(adapter.train),
    }
    return LoopView(view.checks, details)


def _input_digest(batch: dict[str, torch.Tensor]) -> str:
    ids = batch["input_ids"].reshape(-1)
    return json.dumps(ids.tolist())


def split_check(ctx: RunContext, run: PhaseRun) -> Outcome:
    adapter = adapter_of(ctx)
    run.current_input = {"train": len(adapter.train), "eval": adapter.eval_examples()}
    return compare_splits(adapter, ctx.check_cancel)


def compare_splits(adapter: Any, check_cancel: Callable[[], None] = lambda: None) -> Outcome:
    """Every eval set's inputs against every train row's: identical inputs fail, naming the set."""
    evals = adapter.evals()
    if not evals:
        return Outcome(
            WARN, "the script gives the trainer no eval_dataset: nothing to compare", {"eval_examples": 0}
        )
    seen: dict[str, int] = {}
    for i in range(len(adapter.train)):
        check_cancel()
        seen.setdefault(_input_digest(adapter.train.one(i)), i)
    same: list[tuple[str, int, int]] = []
    per_set: dict[str, int] = {}
    for name, rows in evals.items():
        hits = [(name, j, seen[d]) for j in range(len(rows)) if (d := _input_digest(rows.one(j))) in seen]
        per_set[name] = len(hits)
        same += hits
    details: dict[str, Any] = {
        "train_examples": len(adapter.train),
        "eval_examples": adapter.eval_examples(),
        "eval_sets": {name: len(rows) for name, rows in evals.items()},
        "same_input": len(same),
        "same_input_by_set": per_set,
        "pairs": [{"eval": f"{name}[{j}]", "train": f"train[{k}]"} for name, j, k in same[:10]],
    }
    sets = f" over {len(evals)} eval sets ({', '.join(evals)})" if len(evals) > 1 else ""
    if same:
        name, j, k = same[0]
        which = ", ".join(f"{n}: {c} of {len(evals[n])}" for n, c in per_set.items() if c)
        return Outcome(
            FAIL,
            f"{len(same)} eval examples have inputs identical to a train example ({which}; "
            f"{name}[{j}] = train[{k}]): evaluation measures memorisation",
            details,
        )
    return Outcome(
        PASS,
        f"no eval example has the inputs of a train example ({adapter.eval_examples()} compared{sets})",
        details,
    )


# Overfit steps between two reads of the argmax's recovery.
RECOVERY_EVERY = 8


def overfit(ctx: RunContext, run: PhaseRun) -> Outcome:
    """`training_step` (their compute_loss and normaliser) on a tiny subset, a plain AdamW at
    `overfit.lr` stepping it; the captured weights are put back afterwards."""
    trainer, adapter, o = trainer_of(ctx), adapter_of(ctx), ctx.spec.overfit
    model = trainer.model
    m = min(o.examples, len(adapter.train))
    rows = [adapter.train.dataset[i] for i in range(m)]
    batch = adapter.train.collate_fn(rows)
    run.current_input = {"examples": m}
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=o.lr)
    losses: list[float] = []
    stopped = "max_steps"
    try:
        for step in range(o.max_steps):
            ctx.check_cancel()
            model.zero_grad(set_to_none=True)
            num = trainer._get_num_items_in_batch([batch], trainer.args.device)
            trainer.current_gradient_accumulation_steps = 1
            loss = float(trainer.training_step(model, batch, num))
            opt.step()
            losses.append(loss)
            ctx.progress(run.step.key, step + 1, o.max_steps, loss)
            if not finite(loss) or loss < o.loss_below:
                stopped = "loss" if finite(loss) else "non_finite"
                break
            # Recovery passes the phase as the loss does: read it every few steps (a forward, a
            # third of a step), and stop once the subset is learnt by that measure.
            if (step + 1) % RECOVERY_EVERY == 0:
                seen = _recovered(model, trainer, batch, adapter.kind)
                if seen is not None and seen >= o.recover:
                    stopped = "recovered"
                    break
        recovered = _recovered(model, trainer, batch, adapter.kind)
    finally:
        del opt
        loop.restore(loop.unwrapped(trainer), ctx.memo[INITIAL])
    details = {
        "examples": m,
        "steps": len(losses),
        # What ended the loop: the loss below its target, the argmax recovering the subset (read
        # every RECOVERY_EVERY steps), a non-finite loss, or max_steps.
        "stopped": stopped,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "losses": losses[:: max(1, len(losses) // 50)],
        **({"recovered": recovered} if recovered is not None else {}),
        "loss_below": o.loss_below,
        "recover": o.recover,
        "lr": o.lr,
        "weights": "put back to the captured ones after the phase",
    }
    if not finite(losses[-1]):
        raise PhaseFailure(f"non-finite loss at overfit step {len(losses)}", details)
    unit = adapter.kind.unit
    argmax = (
        f"argmax recovers {recovered:.0%} of the {unit}"
        if recovered is not None
        else f"the batches name no class or token to read an argmax against ({adapter.kind.label})"
    )
    if losses[-1] < o.loss_below or (recovered is not None and recovered >= o.recover):
        return Outcome(
            PASS,
            f"{m} examples learnt in {len(losses)} steps: loss {losses[0]:.3g} -> {losses[-1]:.3g}, {argmax}",
            details,
        )
    needs = f" (needs {o.recover:.0%})" if recovered is not None else ""
    got = f"loss {losses[0]:.3g} -> {losses[-1]:.3g} (needs < {o.loss_below:g}), {argmax}{needs}"
    frozen = frozen_parts(loop.unwrapped(trainer))
    if frozen is not None:
        details["frozen"] = frozen
        trend = loss_trend(losses)
        drop = 1 - trend.last / trend.first if trend.first > 0 else 0.0
        details["loss_drop"] = round(drop, 4)
        if drop >= FROZEN_MIN_DROP:
            # The trainable part learns; what it can reach with the rest frozen is not the
            # absolute target's: a warning that says so, never "not learnt".
            return Outcome(
                WARN,
                f"{m} examples learnt in part in {len(losses)} steps: {got}; {frozen['said']}, and the "
                f"trainable parameters lowered the loss by {drop:.0%} — the loop learns; the frozen parts "
                "cap how far (raise overfit.max_steps or overfit.lr to reach the target)",
                details,
            )
        raise PhaseFailure(
            f"{m} examples not learnt in {len(losses)} steps: {got}; {frozen['said']}, and the trainable "
            f"parameters lowered the loss by {drop:.1%} only (a loop that learns lowers it by "
            f"{FROZEN_MIN_DROP:.0%} at least): check that the gradient reaches them and overfit.lr",
            details,
        )
    raise PhaseFailure(f"{m} examples not learnt in {len(losses)} steps: {got}", details)


# With frozen parts (a LoRA adapter over a frozen base, a frozen head or embeddings) the absolute
# loss target may be out of reach of the trainable parameters in the overfit's steps; a loop whose
# trainable part learns still lowers the loss of the same batch, step after step, by this much.
FROZEN_MIN_DROP = 0.02
PEFT_PREFIX = re.compile(r"^base_model\.model\.")


def frozen_parts(model: torch.nn.Module) -> dict[str, Any] | None:
    """What of the model is frozen (`requires_grad = False`), by module, or None when nothing is."""
    params = dict(model.named_parameters())
    frozen = [n for n, p in params.items() if not p.requires_grad]
    if not frozen:
        return None
    modules: list[str] = []
    for name in frozen:
        parts = re.sub(r"\.\d+(?=\.|$)", ".*", PEFT_PREFIX.sub("", name)).split(".")[:2]
        module = ".".join(parts[:-1] if len(parts) > 1 and parts[-1] in ("weight", "bias") else parts)
        if module not in modules:
            modules.append(module)
    total = sum(p.numel() for p in params.values())
    held = sum(params[n].numel() for n in frozen)
    trainable = total - held
    named = ", ".join(modules[:6]) + (f" and {len(modules) - 6} more" if len(modules) > 6 else "")
    return {
        "frozen_parameters": held,
        "trainable_parameters": trainable,
        "frozen_share": round(held / total, 4) if total else 0.0,
        "modules": modules[:20],
        "said": f"{held / total:.1%} of the parameters are frozen ({named}); {trainable:,} train",
    }


def _recovered(model: torch.nn.Module, trainer: Any, batch: dict[str, Any], kind: Kind) -> float | None:
    """The share of scored targets the model's argmax predicts (a classifier's: its examples'
    classes); None for batches that name none, or targets that are not classes (multi-label,
    regression: the loss alone says whether they were learnt)."""
    seq2seq = loop.encoder_decoder(model)
    inputs = trainer._prepare_inputs(dict(batch))
    if kind.task_kind != CAUSAL_LM:
        if kind.problem in (MULTI_LABEL, REGRESSION) or "labels" not in inputs:
            return None
        labels = inputs.pop("labels")
        model.eval()
        with torch.no_grad():
            pred = model(**inputs).logits.argmax(-1)
        model.train()
        scored = labels != -100
        return float((pred == labels)[scored].float().mean()) if scored.any() else 0.0
    if "labels" not in inputs:
        if "completion_mask" not in inputs:
            return None
        # A preference batch: every sequence, scored where its completion mask is.
        labels = completion_labels(inputs)
        inputs = {k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask")}
        inputs["labels"] = labels
    model.eval()
    with torch.no_grad():
        # An encoder-decoder builds its decoder inputs from the labels (shifted right): they stay.
        labels = inputs["labels"] if seq2seq else inputs.pop("labels")
        logits = model(**inputs).logits
    model.train()
    # The decoder's logit j predicts target j; a causal model's logit t predicts token t + 1.
    pred, target = (logits.argmax(-1), labels) if seq2seq else (logits[:, :-1].argmax(-1), labels[:, 1:])
    scored = target != -100
    return float((pred == target)[scored].float().mean()) if scored.any() else 0.0
