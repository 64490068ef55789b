"""The LR board's runs in forks of a small CPU runner: while the runner does untimed work — the
data checks, the estimate (computing here, or waiting for its fork: `phases/estimate.py`), a run
of the board it trains itself — the next run of the board trains in a fork of the runner on the
other core (`processes/forked_call.py`, `phases/board_fork.py`), and the session's step for that
run takes what the fork trained.

Why the fork's run is the run the runner would have trained: every run of the board is built
fresh from the campaign's configuration with only its LR and seed changed (`subject/task/board.py`:
`ctx.new_state`, seeded from the run's seed), never from a state another phase left; the fork is
taken from a runner whose global state the phase fence put back after every step; and it trains
at the runner's own thread count, one, so every reduction runs in the same order (a test compares
the runs bit for bit with those trained in place). Forks train only beside untimed work: any other
step waits for a fork still training to end first, so the timed phases still run alone.

What the fork sends back is what the run would have sent: its live curve, its `[[runs]]` row, its
predictions artifact (staged outside the records until the run is taken). Each is sent when the
session asks for that run, with the row saying where and for how long it trained. A run that
failed or outran its time ceiling in the fork is trained again in place, so its row and error are
the runner's own. A run asked with other overrides than the fork's (another attempt, a smaller
microbatch) is trained in place and the fork stopped.
"""

from __future__ import annotations

import atexit
import resource
import shutil
import tempfile
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ...core.events import PhaseProgress, RecordUpdate, RunUpdate, WireMessage, json_restored, json_safe
from ...core.steps import Step, campaign_steps
from ..context import SAY_AFTER_S, RunContext
from ..processes.forked_call import ForkedCall, ForkedCallFailed
from .base import PhaseRun, before_step
from .board_fork import DATA_CHECKS, board_may_fork
from .lr_run_row import LiveRun, RunPlan, finish_run, plan_run, run_row

TWINS_KEY = "lr_run.beside"
# The steps a fork of the board may train beside: none is timed (phases/board_fork.py).
UNTIMED = DATA_CHECKS | {"estimate", "lr_run"}
# The overrides the session sends with a run's first attempt (`session/driver._lr_run_attempt`).
FIRST_ATTEMPT = {"attempt": 1, "retry_of": ""}
REPLAYED = {RunUpdate.kind: RunUpdate, RecordUpdate.kind: RecordUpdate}


@dataclass
class Twin:
    """A run of the board training in a fork, and what it was started as."""

    call: ForkedCall
    plan: RunPlan
    beside: list[str]  # the untimed steps it trained beside, in order
    staging: Path

    def discard(self) -> None:
        self.call.kill()
        shutil.rmtree(self.staging, ignore_errors=True)


@dataclass(frozen=True)
class Taken:
    """A run the fork trained, as the step sends it: its `[[runs]]` row and words for the phase row."""

    row: dict[str, Any]
    details: dict[str, Any]


def next_run(ctx: RunContext, step: Step, twins: dict[str, Twin]) -> Step | None:
    """The board's next run after `step` in campaign order that has neither a row nor a fork."""
    done = {row.get("step") for row in ctx.rows}
    board = [s for s in campaign_steps(ctx.spec) if s.phase == "lr_run"]
    keys = [s.key for s in board]
    after = board[keys.index(step.key) + 1 :] if step.key in keys else board
    return next((s for s in after if s.key not in done and s.key not in twins), None)


def _fork(ctx: RunContext, step: Step, beside: str) -> Twin | None:
    run = PhaseRun(step=step, overrides=dict(FIRST_ATTEMPT))
    used: set[str] = ctx.memo.setdefault("lr_run_ids", set())
    before = set(used)
    try:
        plan = plan_run(ctx, run)
    except Exception:  # a refused run is refused in its own step, with the reason
        return None
    finally:
        used.intersection_update(before)  # the id is the step's to take when it runs
    if plan.attempt != 1:
        return None  # this runner trained that run already: the session numbers the next attempt
    staging = Path(tempfile.mkdtemp(prefix="pilot-lr-beside-"))
    atexit.register(shutil.rmtree, staging, True)

    def in_the_fork() -> dict[str, Any]:
        sent: list[WireMessage] = []
        ctx.emit = lambda message: sent.append(message) if message.kind in REPLAYED else None
        ctx.work_dir = staging  # the predictions file, until the step takes the run
        row, live = run_row(ctx, run, plan), LiveRun(ctx, plan.run_id)
        t0 = time.perf_counter()
        ctx.training.lr_run(ctx, run, plan, row, live)  # an error: the step trains it in place
        finish_run(ctx, row, t0, live)
        events = [{"kind": m.kind, **{f.name: getattr(m, f.name) for f in fields(m)}} for m in sent]
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        return json_safe({"events": events, "peak_rss_mb": round(peak_mb, 1)})

    return Twin(ForkedCall(in_the_fork), plan, [beside], staging)


@before_step
def lr_runs_in_pairs(ctx: RunContext, step: Step) -> None:
    """Where the runner's own core does untimed work — the data checks, the estimate (computing
    here or waiting for its fork), an LR run it trains itself — the next run of the board starts
    in a fork; before any other step, a fork still training ends first (timed phases run alone)."""
    twins: dict[str, Twin] = ctx.memo.setdefault(TWINS_KEY, {})
    if step.phase not in UNTIMED:
        for key, twin in list(twins.items()):
            if twin.call.running and not _waited(ctx, step, twin):
                del twins[key]
        return
    running = {key: twin for key, twin in twins.items() if twin.call.running}
    for key, twin in running.items():
        if key != step.key and step.key not in twin.beside:
            twin.beside.append(step.key)
    if step.key in twins or running or not board_may_fork(ctx):
        return
    following = next_run(ctx, step, twins)
    if following is not None:
        twin = _fork(ctx, following, step.key)
        if twin is not None:
            twins[following.key] = twin


def _waited(ctx: RunContext, step: Step, twin: Twin) -> bool:
    """Wait for a fork still training before `step`; False where a cancel stopped it instead."""

    def tick(waited: float) -> None:
        if ctx.cancel.is_set():
            raise TimeoutError  # the run is trained in place if the session asks for it
        if waited >= SAY_AFTER_S:
            message = f"waiting for {twin.plan.run_id}, training in a fork, to end before this step ({waited:.0f} s)"
            ctx.emit(PhaseProgress(step=step.key, done=0, total=1, message=message))

    try:
        twin.call.wait(tick)
    except (ForkedCallFailed, TimeoutError):  # a failed run is trained again in place, in its step
        twin.discard()
        return False
    return True


def _replayed(event: dict[str, Any], staged: Path, final: Path) -> WireMessage:
    """One event the fork sent, its staged predictions path replaced by the records' own."""

    def moved(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: moved(v) for k, v in value.items()}
        if isinstance(value, list):
            return [moved(v) for v in value]
        return str(final) if value == str(staged) else value

    body = moved(json_restored(event))
    return REPLAYED[body.pop("kind")](**body)


def take(ctx: RunContext, run: PhaseRun, plan: RunPlan) -> Taken | None:
    """The run the fork trained for this step, its events sent as the run would have sent them;
    None to train it here (no fork, other overrides, the fork failed or outran the ceiling)."""
    twins: dict[str, Twin] = ctx.memo.get(TWINS_KEY, {})
    twin = twins.pop(run.step.key, None)
    if twin is None:
        return None
    if twin.plan != plan:
        twin.discard()
        return None
    t0 = time.monotonic()

    def tick(waited: float) -> None:
        ctx.check_cancel()
        if waited >= SAY_AFTER_S:
            message = f"training in a fork beside {' · '.join(twin.beside)}: waiting for it to end"
            ctx.progress(run.step.key, 0, 1, message=message)

    try:
        result = twin.call.wait(tick)
    except ForkedCallFailed:
        shutil.rmtree(twin.staging, ignore_errors=True)
        return None
    own = twin.call.seconds or 0.0
    ceiling = ctx.spec.limit_for("lr_run").time_s
    if ceiling and own > ceiling:
        shutil.rmtree(twin.staging, ignore_errors=True)
        return None
    name = f"{plan.run_id}-predictions.json"
    staged, final = twin.staging / "runs" / name, ctx.work_dir / "runs" / name
    if staged.exists():
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(staged, final)
    shutil.rmtree(twin.staging, ignore_errors=True)
    row: dict[str, Any] = {}
    for event in result["events"]:
        message = _replayed(event, staged, final)
        ctx.emit(message)
        if isinstance(message, RecordUpdate) and message.section == "runs":
            row = dict(message.value)
    waited = time.monotonic() - t0
    details = {
        "trained": (
            f"in a fork of the runner beside {' · '.join(twin.beside)} (same start, same thread count): "
            f"{own:.2f} s of its own, {waited:.2f} s waited here"
        ),
        "fork_s": round(own, 3),
        "beside": list(twin.beside),
        "fork_peak_rss_mb": result["peak_rss_mb"],
    }
    return Taken(row, details)
