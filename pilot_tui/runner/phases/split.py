"""`split`: no example in two splits, on the splits the training really uses (R4).

The pilot's loop splits a task by its group key (conversation, patient, source, period) and checks
groups and identical inputs across splits; a captured trainer's splits are the script's own
datasets, compared input by input (`Training.split_check`).
"""

from __future__ import annotations

from ..context import RunContext
from .base import Outcome, PhaseRun, phase


@phase("split")
def split(ctx: RunContext, run: PhaseRun) -> Outcome:
    return ctx.training.split_check(ctx, run)
