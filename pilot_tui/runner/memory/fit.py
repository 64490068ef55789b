"""One point of the fit search, judged: the ceilings it is held to, and how a point that ran out
of memory or raised is recorded (R10, R11). Shared by every training's way of measuring a point."""

from __future__ import annotations

from typing import Any

from ...analysis.variants import ERROR, FITS, OOM, OVER_CEILING
from ...core.reasons import first_line
from ...core.spec import FitSearchSpec
from ..context import PhaseRun, RunContext
from .oom import is_oom


def search_spec(ctx: RunContext, run: PhaseRun) -> FitSearchSpec:
    """The campaign's `[fit_search]`, or the microbatches a run from the dashboard asks for."""
    return ctx.spec.fit_search or FitSearchSpec(
        microbatches=[int(x) for x in run.overrides.get("microbatches", [ctx.spec.batch.microbatch])]
    )


def ceilings(ctx: RunContext, spec: FitSearchSpec) -> tuple[float, float]:
    if spec.memory_mb:
        return spec.memory_mb, spec.memory_mb
    return ctx.spec.limit_for("first_step").memory_mb, ctx.spec.limit_for("eval_longest").memory_mb


def _over(peak: float, ceiling: float) -> bool:
    return bool(ceiling) and peak > ceiling


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
