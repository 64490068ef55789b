"""`first_step`: the first optimizer update, which allocates the optimizer state (R5), and the
checks made on it: the same update cut into other microbatches (R9, R26), the task's own loss
against a reference, every trainable parameter reached by a gradient, and whether the update
survives the weights' precision at the run's learning rate (R26)."""

from __future__ import annotations

from ...analysis.checks import Check
from ...core.verdict import FAIL, PASS, WARN
from ..checks.numerics import describe, run_ab
from ..checks.precision import rounded_away
from ..context import RunContext
from .base import Outcome, PhaseRun, check, phase

# Shares of a half-precision model's elements whose first update rounds away: above the first the
# run barely trains (a failure), above the second much of it is lost (a warning).
ROUNDED_AWAY_FAIL, ROUNDED_AWAY_WARN = 0.5, 0.1


@phase("first_step")
def first_step(ctx: RunContext, run: PhaseRun) -> Outcome:
    return ctx.training.as_variant(ctx, run, lambda: ctx.training.first_update(ctx, run))


@check(on="first_step")
def precision_at_the_runs_lr(ctx: RunContext, run: PhaseRun, outcome: Outcome) -> Check | None:
    """bf16 / fp16 weights stepped without fp32 master copies: the share of the first update's
    elements that round away at the run's LR, from the optimizer's own state."""
    optimizer = ctx.training.optimizer(ctx, run.step.variant)
    if optimizer is None:
        return None
    found = rounded_away(optimizer)
    if not found.elements:
        return None  # full-precision weights (or an optimizer without Adam moments): nothing lost
    outcome.details["precision"] = found.as_dict()
    half = "/".join(d for d in found.dtypes if d in ("bfloat16", "float16"))
    said = (
        f"{half} weights stepped without fp32 master copies at lr {found.lr:g}: {found.share:.0%} of "
        f"their elements keep their value after the first update (its step is below half their spacing)"
    )
    if found.share < ROUNDED_AWAY_WARN:
        return Check("precision_at_lr", PASS, said)
    cure = (
        "keep the weights in float32 and compute in half precision (mixed precision: a float32 model "
        "with TrainingArguments bf16=True, or a campaign's precision = 'bf16'), or an optimizer that "
        "keeps fp32 master weights"
    )
    verdict = FAIL if found.share >= ROUNDED_AWAY_FAIL else WARN
    what = "the run barely trains" if verdict == FAIL else "much of every update is lost"
    return Check("precision_at_lr", verdict, f"{said}: {what} — {cure}", found.rounded)


@check(on="first_step")
def numerics_against_a_plain_reference(ctx: RunContext, run: PhaseRun, outcome: Outcome) -> Check | None:
    """One batch through the run's configuration (its attention, compiled or not, its autocast)
    against the same weights run plainly: a kernel that computes the wrong gradient fails here."""
    probe = ctx.training.numerics_probe(ctx, run.step.variant)
    if probe is None:
        return None
    found = run_ab(probe)
    outcome.details["numerics"] = found
    return describe(found)


@check(on="first_step")
def packed_documents_apart(ctx: RunContext, run: PhaseRun, outcome: Outcome) -> Check | None:
    """A collator that packs documents into one row: each must score alone as it does in the pack."""
    if "packing" in outcome.details:
        return None  # measured by the update already (the regrouped update's difference explained)
    found = ctx.training.packing_isolation(ctx, run.step.variant)
    if not found:
        return None
    outcome.details["packing"] = found
    if not found.get("compared"):
        return Check(
            "packing", PASS, "the collator packs documents; none could be found again in its pack to compare"
        )
    figures = (
        f"{found['examples']} examples in {found['rows']} rows; {found['compared']} documents placed after "
        f"another scored alone and in the pack: per-token losses {found['worst_token_loss_gap']:.2e} apart at most"
    )
    if found["isolated"]:
        return Check("packing", PASS, f"packed documents do not see each other: {figures}")
    said = (
        f"packed documents see each other: {figures} (e.g. {found['worst_example'] or 'one'}) — the attention "
        "reaches the previous document in the row; restart the positions at each document and let the "
        "model mask by them (transformers: position_ids, no 2-D attention mask; flash-attention's varlen), "
        "or pass a block-diagonal mask"
    )
    if found["prompted_data"]:
        return Check("packing", WARN, said)
    # Plain pretraining text is often packed on purpose across documents: said, not warned.
    return Check("packing", PASS, f"note: {said}")
