"""`eval_longest`: evaluation on the *longest* validation sequences, often the highest peak (R5)."""

from __future__ import annotations

import time

from ...context import Outcome, PhaseFailure, PhaseRun, RunContext, finite
from ...loop.training import collate, evaluate
from ...memory.probes import synchronize


def raw_lengths(ctx: RunContext, indices: list[int]) -> list[int]:
    """Untruncated length of each example as the collate builds it."""
    lengths = []
    for i in indices:
        batch = ctx.task.collate([ctx.task.examples[i]], 0)
        if "raw_length" in batch:
            lengths.append(int(batch["raw_length"][0]))
        elif "attention_mask" in batch:
            lengths.append(int(batch["attention_mask"].sum()))
        else:
            lengths.append(int(batch["labels"].numel()))
    return lengths


def eval_longest(ctx: RunContext, run: PhaseRun) -> Outcome:
    variant = run.step.variant
    cfg = ctx.config(variant, run.overrides)
    state = ctx.state(variant, cfg)
    val = ctx.splits["validation"]
    if not val:
        raise PhaseFailure("the validation split is empty")
    size = int(run.overrides.get("eval_microbatch") or ctx.spec.phases.eval_microbatch or cfg.microbatch)
    lengths = raw_lengths(ctx, val)
    longest = sorted(range(len(val)), key=lambda j: (-lengths[j], val[j]))[:size]
    chosen = [val[j] for j in longest]
    batch = collate(ctx.task, [ctx.task.examples[i] for i in chosen], cfg.max_length, ctx.device)
    shape = list(next(iter(batch.values())).shape)
    run.current_input = {"microbatch": len(chosen), "max_length": cfg.max_length, "shape": shape}
    # The forward alone, synchronised: what one evaluation batch costs in a long run (the plan's
    # eval reserve), without the one-off scan of the validation lengths above. One untimed
    # forward first: a single cold one times kernel loading and the allocator's first growth.
    evaluate(state, ctx.task, batch)
    synchronize(ctx.device)
    t0 = time.perf_counter()
    loss, count = evaluate(state, ctx.task, batch)
    value = float(loss)
    forward_s = time.perf_counter() - t0
    details = {
        "examples": [str(ctx.task.examples[i].get("id", i)) for i in chosen],
        "raw_lengths": [lengths[j] for j in longest],
        "input_shape": shape,
        "supervised_targets": count,
        "loss": value,
        "forward_s": round(forward_s, 6),
        "validation_size": len(val),
    }
    if not finite(value):
        raise PhaseFailure(f"non-finite evaluation loss on the longest batch {shape}", details)
    return Outcome(details=details, params={"eval_microbatch": len(chosen)})
