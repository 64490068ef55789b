"""`fit_search`: the largest microbatch (and max length) that fits, every tried point kept (R11).

Unlike a batch-size finder that halves the batch and leaves the accumulation alone, each point
reports the accumulation that keeps the declared effective batch. Memory is measured where it
peaks: on the first optimizer step (optimizer state appears) and on the longest validation
sequences, not on a forward pass alone. On CUDA a point fails by a real out-of-memory or by the
ceiling; on CPU the declared ceiling is the limit.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from ...analysis.variants import ERROR, FITS, OOM, OVER_CEILING, fit_result
from ...core.events import RecordUpdate
from ...core.reasons import first_line
from ...core.rows import peak_counter
from ...core.spec import FitSearchSpec
from ...core.verdict import FAIL, WARN
from ..context import Cancelled, RunContext
from ..loop.training import collate, evaluate, train_update
from ..memory.cuda_fault import is_sticky
from ..memory.oom import is_oom
from ..memory.probes import MemoryProbe, synchronize
from .base import Outcome, PhaseRun, phase
from .eval_longest import raw_lengths


def ceilings(ctx: RunContext, spec: FitSearchSpec) -> tuple[float, float]:
    if spec.memory_mb:
        return spec.memory_mb, spec.memory_mb
    return ctx.spec.limit_for("first_step").memory_mb, ctx.spec.limit_for("eval_longest").memory_mb


def _over(peak: float, ceiling: float) -> bool:
    return bool(ceiling) and peak > ceiling


def try_point(
    ctx: RunContext, run: PhaseRun, microbatch: int, max_length: int, longest_val: list[int]
) -> dict[str, Any]:
    """Build a fresh state at this size, take two updates and one longest-sequence eval, measured."""
    spec = ctx.spec.fit_search or FitSearchSpec(microbatches=[microbatch])
    train_ceiling, eval_ceiling = ceilings(ctx, spec)
    cfg = ctx.config("control", {"microbatch": microbatch, "max_length": max_length})
    cfg = replace(cfg, variant=f"fit-mb{microbatch}-len{max_length}")
    point: dict[str, Any] = {
        "microbatch": microbatch,
        "max_length": max_length,
        "accumulation": cfg.accumulation,
        "effective_batch": cfg.effective_batch,
    }
    probe = MemoryProbe(ctx.device)
    failure: BaseException | None = None
    phase_name = "first_step"
    try:
        probe.start()
        state = ctx.new_state(cfg)
        for update in (1, 2):
            micro = state.sampler.next_update()
            run.current_input = {"microbatch": microbatch, "max_length": max_length, "update": update}
            t0 = time.perf_counter()
            stats = train_update(state, ctx.task, ctx.device, ctx.spec.optim.grad_clip, micro)
            synchronize(ctx.device)
            # The second update is the steady one: the first also allocates optimizer state.
            point["step_time_s"] = round(time.perf_counter() - t0, 6)
            point["input_shapes"] = stats.shapes
        train = probe.stop()
        point["train_peak_mb"] = probe.peak_mb(train)
        if "peak_allocated_mb" in train:
            point["train_peak_allocated_mb"] = train["peak_allocated_mb"]
        phase_name = "eval_longest"
        size = int(ctx.spec.phases.eval_microbatch or microbatch)
        chosen = longest_val[:size]
        # start() empties the cache first: the eval peak must not read the training reserve.
        probe.start()
        batch = collate(ctx.task, [ctx.task.examples[i] for i in chosen], max_length, ctx.device)
        shape = list(next(iter(batch.values())).shape)
        run.current_input = {"microbatch": len(chosen), "max_length": max_length, "shape": shape}
        point["eval_shape"] = shape
        evaluate(state, ctx.task, batch)
        evaluated = probe.stop()
        point["eval_peak_mb"] = probe.peak_mb(evaluated)
        if "peak_allocated_mb" in evaluated:
            point["eval_peak_allocated_mb"] = evaluated["peak_allocated_mb"]
    except Cancelled:
        raise
    except BaseException as exc:  # a point that fails is a result, not the end of the search
        if is_sticky(exc):
            raise  # …unless the CUDA context is gone: no later point could run (phases/base.py)
        failure = exc
    state = batch = stats = None
    if failure is not None:
        failed(point, failure, phase_name, run)
        failure = None
    gc.collect()
    if ctx.device.type == "cuda":
        torch.cuda.empty_cache()
    return judged(point, train_ceiling, eval_ceiling)


def failed(point: dict[str, Any], failure: BaseException, phase_name: str, run: PhaseRun) -> None:
    """A point whose first step or eval raised: out of memory, or an error, named where."""
    oom = is_oom(failure)
    point["status"] = OOM if oom else ERROR
    point["failed_in"] = phase_name
    point["input"] = dict(run.current_input)
    point["reason"] = (
        f"{'out of memory' if oom else type(failure).__name__} in {phase_name}: {first_line(str(failure))}"[
            :300
        ]
    )


def judged(point: dict[str, Any], train_ceiling: float, eval_ceiling: float) -> dict[str, Any]:
    """A measured point against the ceilings (a point that already failed stays as it is)."""
    if "status" in point:
        return point
    if _over(point["train_peak_mb"], train_ceiling):
        point |= {
            "status": OVER_CEILING,
            "failed_in": "first_step",
            "reason": f"first step peak {point['train_peak_mb']:.1f} MiB over the ceiling {train_ceiling:g} MiB",
        }
    elif _over(point["eval_peak_mb"], eval_ceiling):
        point |= {
            "status": OVER_CEILING,
            "failed_in": "eval_longest",
            "reason": f"eval peak {point['eval_peak_mb']:.1f} MiB over the ceiling {eval_ceiling:g} MiB",
        }
    else:
        point |= {"status": FITS, "reason": "fits"}
    return point


@phase("fit_search")
def fit_search(ctx: RunContext, run: PhaseRun) -> Outcome:
    spec = search_spec(ctx, run)
    val = ctx.splits["validation"]
    raw = raw_lengths(ctx, val)
    longest_val = [val[j] for j in sorted(range(len(val)), key=lambda j: (-raw[j], val[j]))]
    lengths = sorted(spec.max_lengths or [ctx.config("control").max_length])
    return search(ctx, run, spec, lengths, lambda mb, length: try_point(ctx, run, mb, length, longest_val))


def search_spec(ctx: RunContext, run: PhaseRun) -> FitSearchSpec:
    """The campaign's `[fit_search]`, or the microbatches a run from the dashboard asks for."""
    return ctx.spec.fit_search or FitSearchSpec(
        microbatches=[int(x) for x in run.overrides.get("microbatches", [ctx.spec.batch.microbatch])]
    )


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
