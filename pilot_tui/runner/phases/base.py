"""How a phase runs: params in, one row out, whatever happens inside (R6, R10)."""

from __future__ import annotations

import datetime as dt
import gc
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from ...analysis.checks import Check
from ...core import phase_table
from ...core.events import PhaseFinished, PhaseStarted, RunnerError
from ...core.reasons import exception_line, message_line
from ...core.rows import phase_row
from ...core.steps import Step
from ...core.verdict import CANCELLED_BY_USER, FAIL, PASS, WARN, worst
from ..context import CURRENT_STEP, Cancelled, Outcome, PhaseFailure, PhaseRun, RunContext, finite
from ..memory import probes
from ..memory.cuda_fault import POISONED, is_sticky
from ..memory.faults import disk_full_reason, is_cpu_oom, is_disk_full
from ..memory.oom import is_oom
from ..memory.probes import MemoryProbe
from ..subject.task import TaskTraining
from ..timing.deadline import DeadlineExceeded, phase_deadline
from .fence import GlobalState

# A phase module imports what its body needs from here: the decorator, and what a body receives
# and returns (defined beside the context, which the training under test sees too).
__all__ = [
    "AFTER_ROW",
    "BEFORE_STEP",
    "PHASES",
    "Outcome",
    "PhaseFailure",
    "PhaseRun",
    "execute",
    "finite",
    "phase",
]

# ctx.memo key set when a step poisoned the CUDA context: the runner ends after that row.
POISONED_KEY = "cuda_poisoned"


PhaseFn = Callable[[RunContext, PhaseRun], Outcome]
PHASES: dict[str, PhaseFn] = {}
# Hooks around every step (e.g. the variant comparison, R11): before the probe starts, and after
# the row is recorded. A failing hook is reported and never takes the row or the runner down.
StepHook = Callable[[RunContext, Step], None]
RowHook = Callable[[RunContext, Step, dict[str, Any]], None]
BEFORE_STEP: list[StepHook] = []
AFTER_ROW: list[RowHook] = []


def before_step(fn: StepHook) -> StepHook:
    """Register a hook run before every step's measurement starts."""
    BEFORE_STEP.append(fn)
    return fn


def after_row(fn: RowHook) -> RowHook:
    """Register a hook run after every step's row is recorded and emitted."""
    AFTER_ROW.append(fn)
    return fn


def _run_hooks(ctx: RunContext, hooks: list, *args: Any) -> None:
    for hook in hooks:
        try:
            hook(ctx, *args)
        except Exception as exc:
            ctx.emit(RunnerError(message=f"{hook.__name__}: {exception_line(exc)}"))
            if is_sticky(exc):
                # No later step can run in this process: the runner ends after this step.
                ctx.memo[POISONED_KEY] = f"{POISONED}: {exception_line(exc, 300)} in {hook.__name__}"


def phase(name: str) -> Callable[[PhaseFn], PhaseFn]:
    """Register a phase's one body under its name: a second body for the same phase is refused
    (one body per phase; what differs between trainings lives in `Training`)."""

    if phase_table.info(name) is None:
        raise RuntimeError(f"phase body {name!r} has no entry in the phase table (pilot_tui/phase_table.py)")

    def register(fn: PhaseFn) -> PhaseFn:
        known = PHASES.get(name)
        if known is not None and known is not fn:
            raise RuntimeError(
                f"phase {name!r} has a body already ({known.__module__}.{known.__qualname__}): one body per phase"
            )
        PHASES[name] = fn
        return fn

    return register


# Checks registered on a phase: each runs after the phase's body on every training (the pilot's
# loop, a captured trainer) and returns a Check, or None where it has nothing to say. A failing
# or warning check sets the row's verdict (never above what the body already found) and leads
# its reason; every check the phase ran is listed in the row's `gate_checks`.
CheckFn = Callable[[RunContext, PhaseRun, Outcome], Check | None]
CHECKS: dict[str, list[CheckFn]] = {}


def check(*, on: str) -> Callable[[CheckFn], CheckFn]:
    """Register a check on the phase `on` (beside its one body, never in its place)."""
    if phase_table.info(on) is None:
        raise RuntimeError(f"check on {on!r}: no such phase in the phase table")

    def register(fn: CheckFn) -> CheckFn:
        CHECKS.setdefault(on, []).append(fn)
        return fn

    return register


def _one_check(fn: CheckFn, ctx: RunContext, run: PhaseRun, outcome: Outcome) -> Check | None:
    """A check that breaks says so as a warning: what the body measured keeps its row."""
    try:
        return fn(ctx, run, outcome)
    except Exception as exc:
        return Check(fn.__name__, WARN, f"the check {fn.__name__} could not run: {exception_line(exc)}")


def with_checks(ctx: RunContext, run: PhaseRun, outcome: Outcome) -> Outcome:
    """The phase's registered checks on what its body measured, folded into its outcome."""
    if outcome.checked_elsewhere:
        return outcome
    found = [
        c for fn in CHECKS.get(run.step.phase, []) if (c := _one_check(fn, ctx, run, outcome)) is not None
    ]
    if not found:
        return outcome
    outcome.details["gate_checks"] = [*outcome.details.get("gate_checks", []), *(c.as_dict() for c in found)]
    said = [c.message for c in found if c.verdict != PASS]
    if said:
        kept = [outcome.reason] if outcome.reason else []
        outcome.reason = "; ".join([*said, *kept]) if outcome.verdict != FAIL else "; ".join([*kept, *said])
        outcome.verdict = worst([outcome.verdict, *(c.verdict for c in found)])
    return outcome


def _gate(ctx: RunContext, run: PhaseRun, probe: MemoryProbe, memory: dict[str, float], seconds: float):
    """The declared ceilings of this phase, checked after it ran (R10 on CPU)."""
    limit = ctx.spec.limit_for(run.step.phase)
    peak = probe.peak_mb(memory)
    kind = "peak reserved" if ctx.device.type == "cuda" else "peak RSS"
    if limit.memory_mb and peak > limit.memory_mb:
        return f"{kind} {peak:.0f} MiB is over the declared ceiling {limit.memory_mb:.0f} MiB"
    if limit.time_s and seconds > limit.time_s:
        return f"took {seconds:.2f} s, over the declared ceiling {limit.time_s:g} s"
    return None


def execute(
    ctx: RunContext, step: Step, overrides: dict[str, Any], body: PhaseFn | None = None
) -> dict[str, Any]:
    """Run one step and return its record row; nothing that happens inside escapes.

    The step runs its phase's one registered body, on the campaign's training under test (the
    pilot's own loop unless the context holds another). `body` stands in for it where the step
    is only reported (a rank that leaves a check to rank 0, a fault a test injects)."""
    if ctx.training is None:
        ctx.training = TaskTraining()
    body = body or PHASES.get(step.phase)
    run = PhaseRun(step=step, overrides=dict(overrides))
    if step.variant != "control" or overrides:
        cfg = ctx.config(step.variant, overrides)
        run.params = cfg.params()
    else:
        run.params = ctx.config().params()
    run.params["device"] = str(ctx.device)
    ctx.cancel.clear()
    ctx.emit(PhaseStarted(step=step.key, phase=step.phase, variant=step.variant, params=run.params))
    started = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
    _run_hooks(ctx, BEFORE_STEP, step)
    probe = MemoryProbe(ctx.device)
    poison: str | None = ctx.memo.get(POISONED_KEY)
    try:
        probe.start()
    except BaseException as exc:  # the context broke before this step began (a hook, say)
        poison = poison or f"{exception_line(exc, 300)} (before the step began)"
    t0 = time.perf_counter()
    failure: BaseException | None = None
    outcome = Outcome()
    deadline = None
    fence = GlobalState.now()  # what the phase found: put back after it, whatever happens inside
    ctx.memo[CURRENT_STEP] = step.key  # a long call inside says so on this step's line (ctx.saying)
    try:
        if poison is not None:
            raise PhaseFailure("not run: the CUDA context was already poisoned")
        if body is None:
            raise PhaseFailure(f"no phase named {step.phase!r} in this runner")
        with phase_deadline(ctx.spec.limit_for(step.phase).time_s, ctx.cancel) as deadline:
            outcome = with_checks(ctx, run, body(ctx, run))
    except BaseException as exc:  # a phase never takes the runner down
        failure = exc
        if deadline is not None and deadline.hit and isinstance(exc, Cancelled):
            failure = DeadlineExceeded(f"still running at its time_s ceiling of {deadline.seconds:g} s")
    lost = fence.restore()
    # Outside the except block: the traceback no longer pins the failed tensors, so the memory
    # can really be returned before the next attempt (R10).
    if failure is not None:
        outcome = _failed_outcome(ctx, run, failure)
        if is_sticky(failure):
            poison = exception_line(failure, 300)
        if not isinstance(failure, PhaseFailure | Cancelled):
            _drop_partial_grads(ctx, step)  # it broke mid-update: its gradients are partial
        failure = None
        gc.collect()
    memory: dict[str, Any] = {}
    seconds = time.perf_counter() - t0
    try:
        # After a sticky CUDA error these raise again: that is how a poisoned context shows.
        if outcome.verdict == FAIL and ctx.device.type == "cuda":
            torch.cuda.empty_cache()
        probes.synchronize(ctx.device)
        seconds = time.perf_counter() - t0
        memory = probe.stop()
    except BaseException as exc:
        poison = poison or exception_line(exc, 300)
        memory = probe.baseline()
    if outcome.duration_s is not None:
        seconds = outcome.duration_s
    if outcome.memory is not None and poison is None:
        memory = dict(outcome.memory)
    if lost:
        outcome.details["fence"] = "not put back after the phase: " + "; ".join(lost)
    if poison is not None:
        outcome = _poisoned_outcome(ctx, run, outcome, poison)
    over = _gate(ctx, run, probe, memory, seconds) if poison is None else None
    if over and outcome.verdict != FAIL:
        # Same fields as an out-of-memory: the reason names the input that went over (R10).
        shape = f" on input {run.current_input}" if run.current_input else ""
        outcome.verdict, outcome.reason = FAIL, f"{over} in {step.phase}{shape}"
        outcome.details.setdefault("input", run.current_input)
    row = phase_row(
        name=step.phase,
        step=step.key,
        variant=step.variant,
        verdict=outcome.verdict,
        reason=outcome.reason,
        started=started,
        duration_s=seconds,
        params=run.params | outcome.params,
        memory=memory,
        details=outcome.details,
        cancelled=outcome.cancelled,
    )
    ctx.rows.append(row)
    ctx.emit(PhaseFinished(step=step.key, row=row))
    if poison is None:
        _run_hooks(ctx, AFTER_ROW, step, row)  # nothing more may touch a poisoned context
    return row


def _poisoned_outcome(ctx: RunContext, run: PhaseRun, outcome: Outcome, error: str) -> Outcome:
    """The row of a step whose CUDA context can no longer be used (runner/memory/cuda_fault.py)."""
    shape = f" on input {run.current_input}" if run.current_input else ""
    error = error.removeprefix(f"{POISONED}: ")
    reason = (
        f"{POISONED}: {error} in {run.step.phase}{shape}; this runner ends and the next step "
        "starts in a new one"
    )
    ctx.memo[POISONED_KEY] = reason
    details = dict(outcome.details) | {"cuda_error": error, "poisoned": True}
    if outcome.verdict == FAIL and outcome.reason:
        details["body_error"] = outcome.reason
    return Outcome(FAIL, reason, details, outcome.params)


def _drop_partial_grads(ctx: RunContext, step: Step) -> None:
    """An update that failed half-way (e.g. out of memory in backward) leaves partial `.grad`
    tensors: they mean nothing and would stay resident under the next attempt (R10)."""
    state = ctx.states.get(step.variant)
    if state is None:
        return
    try:
        state.optimizer.zero_grad(set_to_none=True)
    except Exception as exc:  # never hides the row
        ctx.emit(RunnerError(message=f"could not free the gradients: {exception_line(exc)}"))


def _failed_outcome(ctx: RunContext, run: PhaseRun, exc: BaseException) -> Outcome:
    where = {"input": dict(run.current_input)} if run.current_input else {}
    shape = f" on input {run.current_input}" if run.current_input else ""
    if isinstance(exc, DeadlineExceeded):
        # Stopped while it ran, not judged after (R24): the row says it hung, and where.
        return Outcome(FAIL, f"hung: {exc} in {run.step.phase}{shape}; stopped at the deadline", where)
    if isinstance(exc, Cancelled):
        return Outcome(FAIL, CANCELLED_BY_USER, where, cancelled=True)
    if isinstance(exc, PhaseFailure):
        return Outcome(FAIL, exc.reason, exc.details | where)
    if is_disk_full(exc, ctx.work_dir):
        return Outcome(
            FAIL, disk_full_reason(ctx.work_dir, run.step.phase), where | {"error": message_line(exc)}
        )
    if is_oom(exc):
        # This phase's count is the row's `memory.num_ooms`; this one is the runner's lifetime.
        try:
            stats = torch.cuda.memory_stats(ctx.device) if ctx.device.type == "cuda" else {}
        except Exception:  # e.g. a poisoned context: the row still goes out
            stats = {}
        details = where | {
            "runner_num_ooms": int(stats.get("num_ooms", 0)),
            "error": message_line(exc),
        }
        host = " (host memory)" if ctx.device.type != "cuda" or is_cpu_oom(exc) else ""
        if not shape and "microbatch" in run.params:
            # A phase that did not name its batch: the configuration's shape still says which (R10).
            p = run.params
            shape = f" on input microbatch {p['microbatch']} × max length {p.get('max_length', '?')}"
            details["input"] = {k: p[k] for k in ("microbatch", "max_length") if k in p}
        return Outcome(FAIL, f"out of memory{host} in {run.step.phase}{shape}", details)
    tb = "".join(traceback.format_exception(exc)[-6:])
    return Outcome(
        FAIL,
        f"{exception_line(exc)}{shape}",
        where | {"traceback": tb},
    )
