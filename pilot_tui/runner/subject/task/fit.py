"""A fit-search point on the pilot's own loop: a fresh state at the point's microbatch and max
length, two updates and one evaluation of the longest validation rows, each peak measured."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from ....core.spec import FitSearchSpec
from ...context import Cancelled, PhaseRun, RunContext
from ...loop.training import collate, evaluate, train_update
from ...memory.cuda_fault import is_sticky
from ...memory.fit import ceilings, failed, judged
from ...memory.probes import MemoryProbe, synchronize
from .eval_longest import raw_lengths


def lengths(ctx: RunContext, spec: FitSearchSpec) -> list[int]:
    return sorted(spec.max_lengths or [ctx.config("control").max_length])


def points(ctx: RunContext, run: PhaseRun) -> Callable[[int, int], dict[str, Any]]:
    val = ctx.splits["validation"]
    raw = raw_lengths(ctx, val)
    longest_val = [val[j] for j in sorted(range(len(val)), key=lambda j: (-raw[j], val[j]))]
    return lambda mb, length: try_point(ctx, run, mb, length, longest_val)


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
