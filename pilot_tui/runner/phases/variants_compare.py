"""The memory-variant comparison (R11, R12): one `[[variants]]` entry after each variant's last step.

Not a phase of its own: a hook that runs after the row of a variant's last measured phase
(`eval_longest`, or the last one not skipped), whatever its verdict, so a variant that ran out of
memory still gets its line in the table. The control gets one too, after its own eval_longest,
so the table holds the reference every ratio is taken against.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import Any

import torch

from ...analysis import variants as vmath
from ...core import phase_table
from ...core.events import RecordUpdate
from ...core.reasons import exception_line
from ...core.rows import read_rows
from ...core.steps import Step
from ...tasks.contract import CAUSAL_LM
from ..checks import objective
from ..context import RunContext
from ..loop.residency import (
    MIB,
    gradient_tensors,
    optimizer_tensors,
    park_others,
    state_bytes,
    tensors_bytes,
    weight_tensors,
)
from ..loop.training import TrainState, autocast, collate
from ..subject.base import Training
from .base import after_row, before_step

ENTRIES = "variant_entries"  # ctx.memo key: id -> the entry emitted for it
TARGETS = "variant_targets"  # ctx.memo key: max_length -> per-example supervised targets
CHUNK = 64  # examples per collate call when scanning the train set
PARKED_FOR_FIT = "parked_for_fit_search"  # ctx.memo key: the states parked under the fit search


def last_measured_phase(ctx: RunContext) -> str | None:
    """The variant phase after which the comparison is made (eval_longest unless skipped)."""
    kept = [p for p in phase_table.per_variant() if p not in ctx.spec.phases.skip]
    return kept[-1] if kept else None


@before_step
def measure_alone(ctx: RunContext, step: Step) -> None:
    """Park every other training state off the device before a measured variant phase (CUDA).

    LR runs build their own fresh state too: the control's need not sit under them either. A fit
    search builds a fresh state for every point and uses none of the kept ones, so *every* state
    is parked, the control's included: its weights, gradients and AdamW state (~16 B per
    parameter) under each point would under-report the largest microbatch that fits.
    """
    if step.phase == "fit_search":
        ctx.memo[PARKED_FOR_FIT] = park_others(ctx.states, None, ctx.parked, ctx.device)
    elif step.phase in phase_table.per_variant() or step.phase == "lr_run":
        park_others(ctx.states, step.variant, ctx.parked, ctx.device)


@after_row
def compare_variant(ctx: RunContext, step: Step, row: dict[str, Any]) -> None:
    """After a variant's last measured phase: emit its comparison entry, then free its state."""
    if step.phase != last_measured_phase(ctx) or step.phase not in phase_table.per_variant():
        return
    entry = build_entry(ctx, step.variant)
    ctx.memo.setdefault(ENTRIES, {})[step.variant] = entry
    ctx.emit(RecordUpdate(section="variants", value=entry))
    if step.variant != "control":
        # A measured variant is done: its weights and optimizer state must not sit on the device
        # under the next one (a rerun of its steps rebuilds it from the same seed).
        ctx.states.pop(step.variant, None)
        ctx.parked.discard(step.variant)
        gc.collect()
        if ctx.device.type == "cuda":
            torch.cuda.empty_cache()


def build_entry(ctx: RunContext, variant: str) -> dict[str, Any]:
    """The flat comparison entry of one variant from its rows, its tensors and its targets."""
    all_rows = read_rows(ctx.rows)
    rows = vmath.variant_phase_rows(all_rows, variant)
    params = next((dict(r.params) for r in rows.values()), None) or ctx.config(variant).params()
    params.setdefault("device", str(ctx.device))
    state = ctx.states.get(variant)
    peak = vmath.peaks(rows.values())
    breakdown: dict[str, Any] = {}
    if state is not None:
        own = state_bytes(state)
        others = sum(
            tensors_bytes(_all_tensors(s), ctx.device) for name, s in ctx.states.items() if name != variant
        )
        order = ("load", *phase_table.per_variant())
        baseline_rows = vmath.variant_phase_rows(all_rows, variant, order)
        if variant != "control":
            baseline_rows.pop("load", None)
        first = next((baseline_rows[p] for p in order if p in baseline_rows), None)
        baseline = first.memory.values.get("baseline_rss_mb") if first is not None else None
        breakdown = vmath.memory_breakdown(
            device_kind=ctx.device.type,
            weights_mb=own["weights"] / MIB,
            gradients_mb=own["gradients"] / MIB,
            optimizer_state_mb=own["optimizer_state"] / MIB,
            peak=peak,
            other_states_mb=others / MIB,
            process_baseline_mb=baseline,
        )
        try:
            saved = saved_tensors(ctx, state)
            breakdown["saved_activations_mb"] = round(saved["activations"] / MIB, 3)
            # Kept apart: autocast's low-precision weight copies are not activations (R11).
            breakdown["saved_weight_casts_mb"] = round(saved["weight_casts"] / MIB, 3)
        except Exception as exc:  # e.g. the same out of memory again: the entry still goes out
            breakdown["saved_activations_note"] = f"not measured: {exception_line(exc)}"[:200]
    else:
        breakdown["memory_note"] = getattr(ctx.training, "breakdown_note", Training.breakdown_note)
    breakdown["accumulation_note"] = vmath.ACCUMULATION_NOTE
    question = same_question(
        ctx,
        variant,
        int(params.get("max_length", ctx.max_length)),
        int(params.get("effective_batch", 0)),
        params,
    )
    control = ctx.memo.get(ENTRIES, {}).get("control") if variant != "control" else None
    if variant != "control" and control is None and vmath.variant_phase_rows(all_rows, "control"):
        # The control ran but its entry was not built (eval_longest skipped or a rerun): build it.
        control = build_control_reference(ctx)
    entry = vmath.compare_entry(variant, params, rows, breakdown, question, control)
    if variant == "control":
        entry.pop("control_measured", None)
        entry.pop("ratio_note", None)
    return entry


def build_control_reference(ctx: RunContext) -> dict[str, Any]:
    rows = vmath.variant_phase_rows(read_rows(ctx.rows), "control")
    ref: dict[str, Any] = vmath.peaks(rows.values()) | vmath.throughput(rows)
    state = ctx.states.get("control")
    if state is not None:
        own = state_bytes(state)
        ref["static_mb"] = sum(own.values()) / MIB
    return ref


def _all_tensors(state: TrainState) -> list[torch.Tensor]:

    return weight_tensors(state) + gradient_tensors(state) + optimizer_tensors(state)


# ------------------------------------------------------------------ activations, from the tensors


def longest_train_examples(ctx: RunContext, count: int) -> list[int]:
    """The `count` longest training examples: the microbatch with the highest activation peak."""
    lengths = _train_targets(ctx, 0)[1]
    train = ctx.splits["train"]
    order = sorted(range(len(train)), key=lambda j: (-lengths[j], train[j]))
    return [train[j] for j in order[:count]]


def saved_activations(ctx: RunContext, state: TrainState) -> int:
    """Bytes autograd keeps for backward in one training forward of the longest microbatch."""
    return saved_tensors(ctx, state)["activations"]


def saved_tensors(ctx: RunContext, state: TrainState) -> dict[str, int]:
    """What autograd keeps for backward in one training forward of the longest microbatch.

    Measured from the tensors themselves (saved-tensor hooks), so it is exact on CPU too, where
    the process RSS cannot separate activations from the library. Two kinds are told apart:
    `activations`, and `weight_casts` — under autocast every weight is cast to bf16/fp16 once
    per forward and that copy is saved for backward (2 B per parameter): counted as activations
    it would make every precision variant look like it *adds* activation memory. The weights
    themselves are in neither.
    """
    cfg = state.config
    chosen = longest_train_examples(ctx, cfg.microbatch)
    batch = collate(ctx.task, [ctx.task.examples[i] for i in chosen], cfg.max_length, ctx.device)
    params = list(state.model.parameters())
    weights = {p.untyped_storage().data_ptr() for p in params}
    param_ids = {id(p) for p in params}
    activations: dict[int, int] = {}
    casts: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in weights and t.device.type == ctx.device.type:
            kind = casts if _is_weight_cast(t, param_ids) else activations
            kind[ptr] = t.untyped_storage().nbytes()
        # Detached: an output saved by its own node (SDPA's, say) and packed as itself would close a
        # cycle node → tensor → grad_fn inside the C++ graph, which no garbage collection frees —
        # every variant's measurement would stay on the device under the next one. The storage
        # (and so the byte count) is the same; this graph is never run backward.
        return t.detach()

    was_training = state.model.training
    state.model.train()
    # An extra forward must not move the RNG the campaign's later phases will use (dropout).
    devices = [ctx.device] if ctx.device.type == "cuda" else []
    try:
        with (
            torch.random.fork_rng(devices=devices),
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
        ):
            with autocast(ctx.device, cfg.precision):
                logits = objective.forward(ctx.task, state.model, batch)
                loss = objective.loss_sum(ctx.task, logits, batch)
            del logits, loss  # the graph (and what it saved) goes with them
    finally:
        state.model.train(was_training)
    # A storage seen both ways (a cast saved as-is and a view of it) counts once, as a cast.
    for ptr in casts:
        activations.pop(ptr, None)
    return {"activations": sum(activations.values()), "weight_casts": sum(casts.values())}


def _is_weight_cast(t: torch.Tensor, param_ids: set[int]) -> bool:
    """True for autocast's low-precision copy of a parameter (or a view of that copy).

    Its autograd node leads, through dtype casts and views only, to a parameter's
    AccumulateGrad: nothing computed from data sits in between.
    """
    node = t.grad_fn
    seen_cast = False
    for _ in range(4):  # a cast, then at most a few views (t(), transpose, expand)
        if node is None:
            return False
        name = type(node).__name__
        if name == "AccumulateGrad":
            return seen_cast and id(getattr(node, "variable", None)) in param_ids
        if name.startswith("ToCopyBackward"):
            seen_cast = True
        elif not name.startswith(_VIEW_NODES):
            return False
        nexts = [n for n, _ in node.next_functions if n is not None]
        if len(nexts) != 1:
            return False
        node = nexts[0]
    return False


_VIEW_NODES = ("TBackward", "TransposeBackward", "ViewBackward", "ExpandBackward", "PermuteBackward")


# ------------------------------------------------------------------ same question? (R12)


def _targets_of(task, batch: dict[str, torch.Tensor]) -> list[tuple[tuple[int, int], ...]]:
    labels = batch["labels"]
    if task.kind == CAUSAL_LM and labels.dim() > 1:
        labels = labels[:, 1:]  # the loss shifts by one: position t predicts t + 1
    rows = labels.reshape(labels.shape[0], -1).tolist()
    return [tuple((j, v) for j, v in enumerate(row) if v != task.ignore_index) for row in rows]


def _train_targets(ctx: RunContext, max_length: int) -> tuple[list[tuple], list[int]]:
    """Per training example: its supervised (position, label) targets and its collated length."""
    cache = ctx.memo.setdefault(TARGETS, {})
    if max_length not in cache:
        targets: list[tuple] = []
        lengths: list[int] = []
        train = ctx.splits["train"]
        for start in range(0, len(train), CHUNK):
            examples = [ctx.task.examples[i] for i in train[start : start + CHUNK]]
            batch = ctx.task.collate(examples, max_length)
            targets += _targets_of(ctx.task, batch)
            lengths += _lengths_of(batch)
        cache[max_length] = (targets, lengths)
    return cache[max_length]


def _lengths_of(batch: dict[str, torch.Tensor]) -> list[int]:
    if "raw_length" in batch:
        return [int(x) for x in batch["raw_length"]]
    if "attention_mask" in batch:
        return [int(x) for x in batch["attention_mask"].sum(-1)]
    first = next(iter(batch.values()))
    return [int(first[0].numel())] * len(first)


def compare_targets(control: Sequence[tuple], variant: Sequence[tuple]) -> tuple[int, int, int]:
    """(examples whose targets differ, supervised targets lost, supervised targets of the control)."""
    changed = sum(1 for a, b in zip(control, variant, strict=True) if a != b)
    lost = sum(max(0, len(a) - len(b)) for a, b in zip(control, variant, strict=True))
    return changed, lost, sum(len(a) for a in control)


def same_question(
    ctx: RunContext,
    variant: str,
    max_length: int,
    effective_batch: int,
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Collate the whole train set with the control's and the variant's max length and compare;
    the dimensions that change the question by themselves are compared on the params."""
    control_cfg = ctx.config("control")
    examples = len(ctx.splits["train"])
    if variant == "control" or max_length == control_cfg.max_length:
        changed, lost, supervised = 0, 0, 1
    else:
        changed, lost, supervised = compare_targets(
            _train_targets(ctx, control_cfg.max_length)[0], _train_targets(ctx, max_length)[0]
        )
    return vmath.question_change(
        examples=examples,
        targets_changed=changed,
        supervised_lost=lost,
        supervised_control=supervised,
        effective_batch=effective_batch or control_cfg.effective_batch,
        control_effective_batch=control_cfg.effective_batch,
        params=params,
        control_params=control_cfg.params(),
    )
