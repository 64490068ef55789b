"""`lr_run`: one LR at one seed for the declared budget, from the same start as every other LR (R13, R14).

Every run of the board is built fresh from the campaign's own configuration with only the LR and
the seed changed: same architecture, same data and data order at that seed, same effective batch,
same budget, same validation batches. Anything that would change one of those is refused before
the run starts. The run's row in `[[runs]]` is sent once, when the run ends — completed, stopped,
diverged, failed or cancelled — and the record only ever appends it.
"""

from __future__ import annotations

import time

from ...core.verdict import FAIL, PASS, WARN
from ..context import RunContext
from .base import Outcome, PhaseRun, phase
from .lr_run_beside import take
from .lr_run_row import LiveRun, finish_failed_run, finish_run, plan_run, run_row

VERDICTS = {"completed": PASS, "stopped": WARN, "diverged": FAIL, "failed": FAIL, "cancelled": FAIL}


@phase("lr_run")
def lr_run(ctx: RunContext, run: PhaseRun) -> Outcome:
    plan = plan_run(ctx, run)  # a refusal ends here: fail row, no [[runs]] entry, no id used
    board = plan.board
    t0 = time.perf_counter()
    row = run_row(ctx, run, plan)
    live = LiveRun(ctx, plan.run_id)
    try:
        # The run a fork trained beside untimed work (phases/lr_run_beside.py), else trained here.
        taken = take(ctx, run, plan)
        if taken is None:
            ctx.training.lr_run(ctx, run, plan, row, live)
    except BaseException as exc:
        # The run keeps its row whatever happened (a cancel while its fork trained too), then
        # the phase row says why (R14).
        finish_failed_run(ctx, row, t0, live, exc)
        raise
    if taken is not None:
        row = taken.row
    else:
        finish_run(ctx, row, t0, live)
    details = {
        k: row[k]
        for k in (
            "id",
            "status",
            "stop_cause",
            "stop_step",
            "updates_done",
            "initial_loss",
            "final_loss",
            "final_validation",
            "best_validation",
            "retry_of",
        )
        if k in row
    } | (taken.details if taken is not None else {})
    return Outcome(
        VERDICTS[row["status"]],
        row["reason"],
        details,
        params={"lr": plan.lr, "seed": plan.seed, "total_updates": board.updates, "run_id": plan.run_id},
    )
