"""The command that starts one of pilot-tui's own Python processes (`python -m module args`).

Every process pilot-tui starts for itself (the runner, fresh processes, the estimate, torchrun's
agent and ranks) is made here. `PILOT_TUI_LAUNCHER`, when set, is a command put in place of
`python -m` (split as a shell would): it is given the module and its arguments and must behave
as `python -m` would (same pipes, same exit status). The test suite sets it to a launcher that
forks each process from one that has already imported torch (`tests/warm/`), which saves seconds
of imports a process; unset, as for every user, the command is plain `python -m`.
"""

from __future__ import annotations

import difflib
import os
import shlex
import shutil
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


# ---------------------------------------------------------------------- the user's own programs


def find_command(name: str) -> str | None:
    """Where a console command named alone (`llamafactory-cli`) is: beside this Python first (the
    environment pip installed it into, whether or not it is activated), then on PATH."""
    here = os.path.dirname(sys.executable)
    return shutil.which(name, path=os.pathsep.join([here, os.environ.get("PATH", "")]))


def runs_python(path: str) -> bool:
    """A file that runs as a Python program: a `.py` file, or a script whose first line is a
    shebang naming python (what pip writes for a package's console command)."""
    if path.endswith(".py"):
        return True
    try:
        with open(path, "rb") as handle:
            first = handle.readline(256)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def command_changes(given: Sequence[str], args: Sequence[str]) -> list[str]:
    """Every way the command piloted differs from the one the user gave, one line each."""
    out: list[str] = []
    matcher = difflib.SequenceMatcher(a=list(given), b=list(args), autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        old, new = shlex.join(given[i1:i2]), shlex.join(args[j1:j2])
        if op == "insert":
            out.append(f"added {new}")
        elif op == "delete":
            out.append(f"removed {old}")
        elif op == "replace":
            out.append(f"{old} -> {new}")
    return out
