"""`fit_search` on a captured trainer: the largest microbatch that fits, by changing
`trainer.args` in place as a memory variant does (microbatch, the accumulation that keeps the
effective batch, the control's activation checkpointing), each point its own two updates of the
trainer's `train()` from the captured weights and one `evaluate()` of its longest eval rows.

The search, the `[fit]` section and the row are every training's (phases/fit_search.py); only how
one point is measured differs. Max lengths are not searched: the script tokenised (and cut) its
rows before the capture, so the spec refuses `fit_search.max_lengths` on a trainer campaign.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import torch

from ....core.spec import FitSearchSpec
from ...context import Cancelled, PhaseFailure, PhaseRun, RunContext
from ...memory.cuda_fault import is_sticky
from ...memory.fit import ceilings, failed, judged, search_spec
from ...memory.probes import MemoryProbe
from . import loop
from .captured import adapter_of, from_start, probe_for, trainer_of


def _longest_eval(ctx: RunContext) -> tuple[Any, list[int]] | None:
    """The eval set holding the longest row and its `per_device_eval_batch_size` longest rows:
    the one evaluation batch where the eval pass peaks."""
    adapter, trainer = adapter_of(ctx), trainer_of(ctx)
    sets = [(split, key, rows) for split, (key, rows) in adapter.eval_sets.items() if len(rows)]
    if not sets:
        return None
    split, key, rows = max(sets, key=lambda s: max(adapter.length(s[0], i) for i in range(len(s[2]))))
    order = sorted(range(len(rows)), key=lambda i: -adapter.length(split, i))
    ds = trainer.eval_dataset if key is None else trainer.eval_dataset[key]
    return ds, order[: max(1, trainer.args.per_device_eval_batch_size)]


def try_point(ctx: RunContext, run: PhaseRun, microbatch: int, longest: Any) -> dict[str, Any]:
    trainer = trainer_of(ctx)
    spec = search_spec(ctx, run)
    train_ceiling, eval_ceiling = ceilings(ctx, spec)
    cfg = ctx.config("control", {"microbatch": microbatch})
    point: dict[str, Any] = {
        "microbatch": microbatch,
        "max_length": cfg.max_length,
        "accumulation": cfg.accumulation,
        "effective_batch": cfg.effective_batch,
        "activation_checkpointing": cfg.activation_checkpointing,
        "eval_peak_mb": 0.0,
    }
    memory = MemoryProbe(ctx.device)
    phase_name = "first_step"
    try:
        with loop.batch_settings(trainer, microbatch, cfg.accumulation, cfg.activation_checkpointing):
            from_start(ctx)
            steps = probe_for(ctx, run)
            run.current_input = {"microbatch": microbatch, "accumulation": cfg.accumulation, "updates": 2}
            memory.start()
            # Two updates: the second meets the optimizer state the first created.
            loop.train_steps(trainer, 2, steps)
            train = memory.stop()
            point["train_peak_mb"] = memory.peak_mb(train)
            if "peak_allocated_mb" in train:
                point["train_peak_allocated_mb"] = train["peak_allocated_mb"]
            times = steps.step_times()
            point["step_time_s"] = round(times[-1], 6) if times else None
            if longest is not None:
                phase_name = "eval_longest"
                ds, rows = longest
                subset = ds.select(rows) if hasattr(ds, "select") else torch.utils.data.Subset(ds, rows)
                run.current_input = {"examples": len(rows)}
                memory.start()
                trainer.evaluate(eval_dataset=subset)
                evaluated = memory.stop()
                point["eval_peak_mb"] = memory.peak_mb(evaluated)
                if "peak_allocated_mb" in evaluated:
                    point["eval_peak_allocated_mb"] = evaluated["peak_allocated_mb"]
    except Cancelled:
        raise
    except BaseException as exc:  # a point that fails is a result, not the end of the search
        if is_sticky(exc):
            raise
        failed(point, exc, phase_name, run)
    finally:
        loop.fresh_optimizer(trainer)  # the point's optimizer state goes with it
        gc.collect()
        if ctx.device.type == "cuda":
            torch.cuda.empty_cache()
    return judged(point, train_ceiling, eval_ceiling)


def lengths(ctx: RunContext, spec: FitSearchSpec) -> list[int]:
    if spec.max_lengths:
        raise PhaseFailure(
            "a captured trainer's max length is fixed by the script's tokenisation: only microbatches are searched"
        )
    return [ctx.config("control").max_length]


def points(ctx: RunContext, run: PhaseRun) -> Callable[[int, int], dict[str, Any]]:
    longest = _longest_eval(ctx)
    return lambda mb, _length: try_point(ctx, run, mb, longest)
