"""The command that starts one of pilot-tui's own Python processes (`python -m module args`).

Every process pilot-tui starts for itself (the runner, fresh processes, the estimate, torchrun's
agent and ranks) is made here. `PILOT_TUI_LAUNCHER`, when set, is a command put in place of
`python -m` (split as a shell would): it is given the module and its arguments and must behave
as `python -m` would (same pipes, same exit status). The test suite sets it to a launcher that
forks each process from one that has already imported torch (`tests/warm/`), which saves seconds
of imports a process; unset, as for every user, the command is plain `python -m`.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence

LAUNCHER_ENV = "PILOT_TUI_LAUNCHER"


def launcher() -> list[str]:
    """The launcher's command words, or [] when processes start as plain `python -m`."""
    return shlex.split(os.environ.get(LAUNCHER_ENV, ""))


def module_command(module: str, args: Sequence[str] = ()) -> list[str]:
    """`python -m module args`, or the launcher's equivalent."""
    prefix = launcher()
    return [*prefix, module, *args] if prefix else [sys.executable, "-m", module, *args]


def torchrun_script(module: str) -> list[str]:
    """torchrun's arguments that name each rank's program: `-m module`, or, with a launcher,
    `--no-python` and the launcher's command (torchrun then starts it as it is)."""
    prefix = launcher()
    return ["--no-python", *prefix, module] if prefix else ["-m", module]
