"""`fit_search`: the largest microbatch (and max length) that fits, every tried point kept (R11).

Unlike a batch-size finder that halves the batch and leaves the accumulation alone, each point
reports the accumulation that keeps the declared effective batch. Memory is measured where it
peaks: on the first optimizer step (optimizer state appears) and on the longest validation
sequences, not on a forward pass alone. On CUDA a point fails by a real out-of-memory or by the
ceiling; on CPU the declared ceiling is the limit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...analysis.variants import FITS, fit_result
from ...core.events import RecordUpdate
from ...core.rows import peak_counter
from ...core.spec import FitSearchSpec
from ...core.verdict import FAIL, WARN
from ..context import RunContext
from ..memory.fit import ceilings, search_spec
from ..memory.probes import MemoryProbe
from .base import Outcome, PhaseRun, phase


@phase("fit_search")
def fit_search(ctx: RunContext, run: PhaseRun) -> Outcome:
    spec = search_spec(ctx, run)
    lengths = ctx.training.fit_lengths(ctx, run, spec)
    return search(ctx, run, spec, lengths, ctx.training.fit_points(ctx, run))


def search(
    ctx: RunContext,
    run: PhaseRun,
    spec: FitSearchSpec,
    lengths: list[int],
    try_one: Callable[[int, int], dict[str, Any]],
) -> Outcome:
    """Every point (microbatch × max length, ascending), `try_one` measuring each; the `[fit]`
    section and the row. The pilot's loop and a captured trainer differ only in `try_one`."""
    control = ctx.config("control")
    microbatches = sorted(spec.microbatches)
    points: list[dict[str, Any]] = []
    total = len(lengths) * len(microbatches)
    for length in lengths:
        for mb in microbatches:
            ctx.check_cancel()
            point = try_one(mb, length)
            points.append(point)
            ctx.progress(
                run.step.key, len(points), total, message=f"{point_label(mb, length)}: {point['status']}"
            )
            if point["status"] != FITS and spec.stop_at_first_failure:
                break
    # Each point carries its own peaks; reset here so the row's peak is not the last point's.
    MemoryProbe(ctx.device).start()
    train_ceiling, eval_ceiling = ceilings(ctx, spec)
    result = fit_result(
        points,
        declared_microbatch=control.microbatch,
        declared_max_length=control.max_length,
        effective_batch=control.effective_batch,  # replicas included, as accumulation_for expects
        replicas=control.replicas,
        ceiling_mb=max(train_ceiling, eval_ceiling),
        counter=peak_counter(ctx.device.type),
    )
    result["train_ceiling_mb"], result["eval_ceiling_mb"] = train_ceiling, eval_ceiling
    ctx.emit(RecordUpdate(section="fit", value=result))
    details = {k: v for k, v in result.items() if k != "points"} | {
        "points": [f"{point_label(p['microbatch'], p['max_length'])}: {p['status']}" for p in points],
        "memory_note": "each point carries its own peaks ([fit].points); this row's memory is after the search",
        # Off the device under every point (variants_compare.measure_alone): the control's too.
        "parked_states": list(ctx.memo.get("parked_for_fit_search", [])),
    }
    run.current_input = {}
    if not result["found"]:
        first = points[0] if points else {}
        return Outcome(
            FAIL,
            f"nothing fits: the smallest point tried failed ({first.get('reason', 'none tried')})",
            details,
        )
    declared = next(
        (
            p
            for p in points
            if p["microbatch"] == control.microbatch and p["max_length"] == control.max_length
        ),
        None,
    )
    summary = (
        f"largest fitting microbatch {result['largest_microbatch']}{at_length(result['max_length'])} "
        f"with accumulation {result['accumulation']} (effective batch {result['effective_batch']})"
    )
    if declared is not None and declared["status"] != FITS:
        return Outcome(WARN, f"the declared microbatch {control.microbatch} does not fit; {summary}", details)
    return Outcome(reason=summary, details=details)


def point_label(microbatch: int, max_length: int) -> str:
    """`mb 8 len 128`; without the length where it does not apply (fixed-size features: 0)."""
    return f"mb {microbatch} len {max_length}" if max_length else f"mb {microbatch}"


def at_length(max_length: int) -> str:
    return f" at max length {max_length}" if max_length else ""
