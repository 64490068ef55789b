"""Whether the LR board's runs may train in forks of the runner, and whether its first run goes
beside the data checks.

On a small CPU runner the work that is never timed — the data checks (inspect, split, overfit),
the estimate, the board's runs — can share the two cores, while the timed phases run alone. The
longest of it is a board run (the demo: 1.7 s against the estimate's 0.6 s and the data checks'
0.7 s), so where the board can fork, its first run trains in a fork from the first data check on,
and the estimate's fork starts at its own step, beside that run, the runner waiting for it; where
the board cannot fork, the estimate's fork starts beside the data checks (`phases/estimate.py`).
Either way two processes share two cores.

This module imports neither phase body: both read it.
"""

from __future__ import annotations

import psutil
import torch

from ...core.steps import campaign_steps
from ..context import RunContext
from ..machine.host import available_cores
from ..processes.forked_call import fork_is_safe

# The untimed steps before the estimate: none is timed, and the figures their rows hold are the
# runner's own (its RSS, its losses), which another process does not move.
DATA_CHECKS = frozenset({"inspect", "split", "overfit"})


def board_may_fork(ctx: RunContext) -> bool:
    """A fork gains only on a CPU runner training on one thread with another core, is safe only
    before CUDA or a process group started here, and is measured as the runner measures only where
    no memory ceiling is declared for the phase (the fork's peak is not the runner's)."""
    if not getattr(ctx.training, "board_runs_beside", False) or ctx.device.type != "cpu":
        return False
    if not fork_is_safe() or torch.get_num_threads() != 1 or available_cores() < 2:
        return False
    if ctx.spec.limit_for("lr_run").memory_mb:
        return False
    # The fork builds one fresh state; the runner's whole resident set bounds it from above.
    return psutil.virtual_memory().available > 2 * psutil.Process().memory_info().rss


def board_beside_data_checks(ctx: RunContext) -> bool:
    """The board's first run trains in a fork beside the data checks: the board can fork and has
    a run still to train."""
    if not board_may_fork(ctx):
        return False
    done = {row.get("step") for row in ctx.rows}
    return any(s.phase == "lr_run" and s.key not in done for s in campaign_steps(ctx.spec))
