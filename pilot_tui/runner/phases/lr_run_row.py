"""An LR run's plan and its `[[runs]]` row: what the run is, decided and checked before it starts
(`plan_run`), the row it opens with, its live curve, and the row it closes with whatever ended it.
The phase body (`phases/lr_run.py`) and a run trained beside another (`phases/lr_run_beside.py`)
both build on these."""

from __future__ import annotations

import datetime as dt
import math
import time
from dataclasses import dataclass, replace
from typing import Any

from ...analysis.board import parse_run_name
from ...core import dimensions
from ...core.events import RecordUpdate, RunUpdate
from ...core.phase_table import lr_run_name
from ...core.reasons import exception_line
from ...core.spec import LRBoardSpec
from ...core.verdict import CANCELLED_BY_USER
from ..context import Cancelled, RunContext
from ..loop.training import TrainConfig
from .base import PhaseFailure, PhaseRun

# Overrides an LR run accepts besides the dimensions that allow it (core/dimensions.py: lr,
# microbatch, accumulation, precision, activation checkpointing, max length). The session adds
# `attempt` and `retry_of` (it sees the record); `lr` and `seed` must agree with the run's name;
# the others may change only how the same effective batch is computed (and are checked).
RUN_OVERRIDES = frozenset({"attempt", "retry_of", "seed", "updates"})


def allowed_overrides() -> frozenset[str]:
    return RUN_OVERRIDES | dimensions.lr_run_overrides()


# The board redraws at most ~10 times a second; validations always go out.
UPDATE_PERIOD_S = 0.1


@dataclass(frozen=True)
class RunPlan:
    """What one LR run is, decided before it starts."""

    run_id: str
    base: str
    attempt: int
    retry_of: str
    lr: float
    seed: int
    config: TrainConfig
    board: LRBoardSpec


def _refuse(reason: str) -> PhaseFailure:
    return PhaseFailure(f"refused: {reason}", {"refused": True})


def plan_run(ctx: RunContext, run: PhaseRun) -> RunPlan:
    """Check the run is comparable with every other run of the board; PhaseFailure says why not."""
    board = ctx.spec.lr_board
    if board is None:
        raise _refuse("the campaign declares no [lr_board]")
    name, ov = run.step.variant, dict(run.overrides)
    try:
        lr, seed = parse_run_name(name)
    except ValueError as exc:
        raise _refuse(str(exc)) from None
    unknown = sorted(set(ov) - allowed_overrides())
    if unknown:
        raise _refuse(f"an LR run cannot change {', '.join(unknown)}")
    declared = [x for x in (board.control, *board.variants) if lr_run_name(x, seed) == name]
    if not declared:
        raise _refuse(
            f"lr {lr:g} is not declared in [lr_board] (control {board.control:g}, variants "
            f"{', '.join(f'{v:g}' for v in board.variants) or 'none'}); LRs are declared before the runs"
        )
    lr = declared[0]
    if "lr" in ov and lr_run_name(float(ov["lr"]), seed) != name:
        raise _refuse(f"override lr {ov['lr']} differs from the run's name {name}")
    if "seed" in ov and int(ov["seed"]) != seed:
        raise _refuse(f"override seed {ov['seed']} differs from the run's name {name}")
    if "updates" in ov and int(ov["updates"]) != board.updates:
        raise _refuse(f"budget {ov['updates']} updates differs from the declared {board.updates}")
    b = ctx.spec.batch
    control_effective = b.microbatch * b.accumulation * b.replicas
    cfg = ctx.config(name, {k: v for k, v in ov.items() if k not in ("attempt", "retry_of", "updates")})
    if cfg.effective_batch != control_effective:
        raise _refuse(
            f"effective batch {cfg.microbatch}×{cfg.accumulation}×{cfg.replicas} = {cfg.effective_batch} "
            f"differs from the campaign's {control_effective}"
        )
    if cfg.max_length != ctx.max_length:
        raise _refuse(f"max_length {cfg.max_length} changes the data (the campaign uses {ctx.max_length})")
    cfg = replace(cfg, lr=lr, seed=seed, total_updates=board.updates)
    attempt = max(1, int(ov.get("attempt", 1)))
    # Belt and braces: even without the session's count, this runner never reuses an id.
    used: set[str] = ctx.memo.setdefault("lr_run_ids", set())
    while f"{name}-{attempt}" in used:
        attempt += 1
    run_id = f"{name}-{attempt}"
    used.add(run_id)
    return RunPlan(run_id, name, attempt, str(ov.get("retry_of", "")), lr, seed, cfg, board)


def run_row(ctx: RunContext, run: PhaseRun, plan: RunPlan) -> dict[str, Any]:
    """A `[[runs]]` entry as it starts: declared budget, configuration, nothing trained yet. The
    pilot's own loop and the trainer adapter's both start from it."""
    cfg, board = plan.config, plan.board
    return {
        "id": plan.run_id,
        "step": run.step.key,
        "lr": plan.lr,
        "seed": plan.seed,
        "attempt": plan.attempt,
        "retry_of": plan.retry_of,
        "control": plan.lr == board.control,
        "status": "running",
        "stop_cause": "",
        "stop_step": 0,
        "reason": "",
        "spec_sha256": ctx.loaded.sha256,
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "updates": board.updates,
        "updates_done": 0,
        "validate_every": board.validate_every,
        "microbatch": cfg.microbatch,
        "accumulation": cfg.accumulation,
        "effective_batch": cfg.effective_batch,
        "max_length": cfg.max_length,
        "precision": cfg.precision,
        "losses": [],
        "validation": [],
    }


class LiveRun:
    """Throttled RunUpdate events for the board: ≤ 10 a second, plus every validation."""

    def __init__(self, ctx: RunContext, run_id: str) -> None:
        self.ctx, self.run_id, self.last = ctx, run_id, 0.0

    def send(self, update: int, loss: float, validation: float | None = None, status: str = "running"):
        now = time.monotonic()
        if validation is None and status == "running" and now - self.last < UPDATE_PERIOD_S:
            return
        self.last = now
        self.ctx.emit(RunUpdate(self.run_id, update, loss, validation, status))


def finish_failed_run(
    ctx: RunContext, row: dict[str, Any], t0: float, live: LiveRun, exc: BaseException
) -> None:
    """Close a run that a cancel or an error ended: its row says which, and why."""
    cancelled = isinstance(exc, Cancelled)
    row["status"] = "cancelled" if cancelled else "failed"
    row["reason"] = CANCELLED_BY_USER if cancelled else exception_line(exc)
    finish_run(ctx, row, t0, live)


def finish_run(ctx: RunContext, row: dict[str, Any], t0: float, live: LiveRun) -> None:
    """Close the run: its last live event, then its one `[[runs]]` row."""
    row["duration_s"] = round(time.perf_counter() - t0, 3)
    losses = row["losses"]
    live.send(row["updates_done"], losses[-1] if losses else math.nan, None, row["status"])
    ctx.emit(RecordUpdate(section="runs", value={k: v for k, v in row.items() if v is not None}))
