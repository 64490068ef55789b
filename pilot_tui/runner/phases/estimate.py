"""`estimate`: per-GPU memory of every configuration, before any weight is loaded (R23).

Each configuration (control, memory variants, fit-search points) runs one training update and the
evaluation pass under fake tensors, for the declared strategy and GPU count; the row holds the
figures per configuration and the `[estimate]` section of the record keeps them for the plan.
Nothing is allocated, so a model larger than this machine can still be estimated.

The phase sits after the data checks, and on a CPU runner with a core to spare its work starts
when the first of them does, in a fork of the runner (`processes/forked_call.py`): the data checks
go on beside it, none of them timed, and every other step waits for the fork to end first, so
timed phases still run alone. The fork is taken when the data checks start, before any of them
ran: it estimates from the state the phase found when it ran right after `stack`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ...analysis import memory_estimate as est
from ...core import dimensions
from ...core.events import PhaseProgress, RecordUpdate
from ...core.steps import Step
from ...core.verdict import FAIL, PASS, WARN
from ..context import SAY_AFTER_S, RunContext
from ..memory import workspaces
from ..memory.estimate.campaign import Target, campaign_configs, estimate_configs, source_for, target_of
from ..memory.estimate.fake_run import MIB, FakeConfig, NotEstimable
from ..processes.forked_call import ForkedCall, ForkedCallFailed, core_to_spare, fork_is_safe
from .base import Outcome, PhaseRun, before_step, phase
from .board_fork import DATA_CHECKS, board_beside_data_checks

WORKSPACES_KEY = "estimate.library_workspaces"
FIGURES = (
    "parameters",
    "buffers",
    "gradients",
    "optimizer_state",
    "activations",
    "temporaries",
    "ddp_buckets",
    "library_workspaces",
    "peak_allocated",
    "eval_peak_allocated",
    "eval_activations",
)


def flat_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """One configuration's figures in MiB, flat, as the record and the plan read them."""
    keys = (
        "name",
        *(d.name for d in dimensions.estimable()),
        "strategy",
        "gpus",
        "estimable",
        "trainable_parameters",
        "seconds",
    )
    out: dict[str, Any] = {k: entry[k] for k in keys if k in entry}
    for key in FIGURES:
        if f"{key}_bytes" in entry:
            out[f"{key}_mb"] = round(entry[f"{key}_bytes"] / MIB, 3)
    if not entry.get("estimable"):
        out |= {"op": entry.get("op", ""), "reason": entry.get("reason", "")}
    verdict = entry.get("verdict") or {}
    out |= {k: v for k, v in verdict.items() if k != "reason"}
    if entry.get("smallest_configuration"):
        out["smallest_configuration"] = dict(entry["smallest_configuration"])
    return out


BACKGROUND_KEY = "estimate.background"


@dataclass
class Background:
    """The estimate computing in a fork of the runner, and what it was started for."""

    call: ForkedCall
    target: Target
    configs: tuple[FakeConfig, ...]
    beside: list[str] = field(default_factory=list)


def _compute(
    ctx: RunContext,
    target: Target,
    configs: list[FakeConfig],
    fixed_bytes: int,
    progress: Callable[[int, int, str], None] | None = None,
) -> dict[str, Any]:
    """Every configuration's fake run; a model the fake run cannot rebuild comes back as
    {"not_estimable": (op, reason)}."""
    try:
        source = source_for(ctx)
    except NotEstimable as exc:
        return {"not_estimable": (exc.op, exc.reason)}
    return estimate_configs(source, configs, target, progress, fixed_bytes=fixed_bytes)


def _may_fork(ctx: RunContext) -> bool:
    """A fork gains only where a core is idle beside the runner's torch threads, and is safe only
    before CUDA or a process group started here (`fork_is_safe`); the estimate must still be ahead."""
    if "estimate" in ctx.spec.phases.skip or any(r.get("name") == "estimate" for r in ctx.rows):
        return False
    return ctx.device.type == "cpu" and fork_is_safe() and core_to_spare()


def _fork(ctx: RunContext) -> Background:
    target = target_of(ctx.loaded)
    configs = campaign_configs(ctx, target)
    fixed = device_workspaces(ctx).bytes  # on the CPU: nothing touches a device

    def in_the_fork() -> Any:
        ctx.emit = lambda message: None  # the runner's event pipe is the runner's alone
        torch.set_num_threads(1)  # the idle core; the runner keeps its own
        return _compute(ctx, target, configs, fixed)

    return Background(ForkedCall(in_the_fork), target, tuple(configs))


def estimate_forked(ctx: RunContext) -> bool:
    """The estimate is computing in a fork still: its step will wait for it."""
    found: Background | None = ctx.memo.get(BACKGROUND_KEY)
    return found is not None and found.call.running


@before_step
def estimate_beside_the_data_checks(ctx: RunContext, step: Step) -> None:
    """Start the estimate in a fork when the data checks start; before any other step (timed
    ones above all), wait for it to end. Where the LR board's first run takes the fork beside the
    data checks (`board_fork.py`), the estimate forks at its own step instead, while the runner
    waits: its core would compute it anyway, and the fake runs' imports and caches stay out of the
    runner, whose resident set the later rows measure."""
    found: Background | None = ctx.memo.get(BACKGROUND_KEY)
    if step.phase in DATA_CHECKS:
        if found is None and _may_fork(ctx) and not board_beside_data_checks(ctx):
            found = ctx.memo[BACKGROUND_KEY] = _fork(ctx)
        if found is not None and found.call.running:
            found.beside.append(step.key)
        return
    if step.phase == "estimate":
        if found is None and _may_fork(ctx) and board_beside_data_checks(ctx):
            ctx.memo[BACKGROUND_KEY] = _fork(ctx)
        return
    if found is None or not found.call.running:
        return
    limit = ctx.spec.limit_for("estimate").time_s

    def tick(waited: float) -> None:
        if ctx.cancel.is_set() or (limit and time.monotonic() - found.call.started > limit):
            raise TimeoutError  # the estimate step runs it again, under its own deadline
        if waited >= SAY_AFTER_S:
            message = f"waiting for the estimate's fork to end before this step ({waited:.0f} s)"
            ctx.emit(PhaseProgress(step=step.key, done=0, total=1, message=message))

    with contextlib.suppress(ForkedCallFailed, TimeoutError):  # the estimate step sees how it ended
        found.call.wait(tick)


def _from_background(
    ctx: RunContext, run: PhaseRun, target: Target, configs: list[FakeConfig]
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The fork's result when it was started for these configurations, else None; and words
    for the row on how it was computed."""
    found: Background | None = ctx.memo.pop(BACKGROUND_KEY, None)
    if found is None:
        return None, {}
    if (found.target, found.configs) != (target, tuple(configs)):
        found.call.kill()  # the campaign changed since the fork (a variant added, other flags)
        return None, {}
    t0 = time.monotonic()
    # Started at this step (beside the board's first run in its own fork): the runner waits.
    where = f"beside {' · '.join(found.beside)}" if found.beside else "started at this step"

    def tick(waited: float) -> None:
        ctx.check_cancel()
        ctx.progress(run.step.key, 0, 1, message=f"waiting for the fork that estimates ({where})")

    try:
        result = found.call.wait(tick)
    except ForkedCallFailed as exc:
        return None, {"computed": f"here: the fork {where} failed ({exc})"}
    own = found.call.seconds or 0.0
    waited = time.monotonic() - t0
    how = {
        "computed": f"in a fork of the runner {where}: {own:.2f} s of its own, {waited:.2f} s waited here",
        "fork_s": round(own, 3),
        "beside": list(found.beside),
    }
    return result, how


@phase("estimate")
def estimate(ctx: RunContext, run: PhaseRun) -> Outcome:
    target = target_of(ctx.loaded, **{k: run.overrides.get(k) for k in ("gpus", "strategy", "gpu_memory_gb")})
    configs = campaign_configs(ctx, target)

    def progress(done: int, total: int, message: str) -> None:
        ctx.check_cancel()
        ctx.progress(run.step.key, done, total, message=message)

    fixed = device_workspaces(ctx)
    result, how = _from_background(ctx, run, target, configs)
    if result is None:
        result = _compute(ctx, target, configs, fixed.bytes, progress)
    if "not_estimable" in result:  # a model the fake run cannot rebuild: a warning that says why
        op, reason = result["not_estimable"]
        why = {"op": op, "reason": reason, "configurations": [c.name for c in configs]} | how
        return Outcome(WARN, f"not estimable: {reason}", why)
    entries = [flat_entry(e) for e in result["configurations"]]
    section = {
        "label": est.ESTIMATE_LABEL,
        "source": result["source"],
        "target": result["target"],
        "allowance": result["allowance"],
        "configurations": entries,
        "recommendation": result["recommendation"],
        "library_workspaces_mb": fixed.details()["library_workspaces_mb"],
        "left_out": workspaces.LEFT_OUT,
    }
    ctx.emit(RecordUpdate(section="estimate", value=section))
    details: dict[str, Any] = (
        {
            "label": est.ESTIMATE_LABEL,
            "target": result["target"],
            "allowance": result["allowance"],
            "configurations": [est.line(e) for e in result["configurations"]],
            "estimates": entries,
            "left_out": workspaces.LEFT_OUT,
        }
        | fixed.details()
        | how
    )
    if result["recommendation"]:
        details["recommendation"] = result["recommendation"]
    return estimate_verdict(result["configurations"], target.gpu_memory_gb, details)


def device_workspaces(ctx: RunContext) -> workspaces.Workspaces:
    """Measured once per runner: the libraries' workspaces do not change between estimates."""
    found = ctx.memo.get(WORKSPACES_KEY)
    if found is None:
        # Declared precisions only: a bf16 step's multiplies take a workspace of their own.
        declared = [ctx.spec.batch.precision, *(v.get("precision") for v in ctx.spec.variants)]
        precisions = tuple(sorted({str(p) for p in declared if p}))
        found = ctx.memo[WORKSPACES_KEY] = workspaces.measure(ctx.device, precisions)
    return found


def estimate_verdict(entries: list[dict[str, Any]], gpu_memory_gb: float, details: dict[str, Any]) -> Outcome:
    control = entries[0]
    blocked = [e for e in entries if not e.get("estimable")]
    too_big = [e["name"] for e in entries if (e.get("verdict") or {}).get("fits") is False]
    if not control.get("estimable"):
        return Outcome(WARN, f"control not estimable: {control.get('reason', '')}", details)
    v = control["verdict"]
    where = f"a {gpu_memory_gb:g} GB GPU" if gpu_memory_gb else "any common GPU"
    if v.get("fits") is False:
        smallest = control.get("smallest_configuration")
        hint = (
            f"; smallest that would: {smallest['strategy']} on {smallest['gpus']} × {smallest['gpu_memory_gb']} GB"
            if smallest
            else ""
        )
        return Outcome(
            FAIL,
            f"control needs {v['need_mib'] / 1024:.1f} GiB per GPU: it does not fit {where}{hint}",
            details,
        )
    notes = []
    if too_big:
        notes.append(f"does not fit {where}: {', '.join(too_big)}")
    if blocked:
        notes.append("not estimable: " + ", ".join(f"{e['name']} ({e.get('op', '?')})" for e in blocked))
    summary = (
        f"control needs {v['need_mib'] / 1024:.2f} GiB per GPU (smallest GPU {v.get('smallest_gpu_gb')} GB)"
    )
    if notes:
        return Outcome(WARN, f"{summary}; " + "; ".join(notes), details)
    return Outcome(PASS, summary, details)
