"""Every timeout of the view side's hold on a runner, in one typed object (docs/settings.md).

Each field can be set by a `PILOT_TUI_<FIELD>` environment variable (e.g. `PILOT_TUI_SILENCE_S=300`
for a task whose `build_model` is silent for minutes). They are read when a session starts, not
at import: a test or a caller that changes the environment, or passes its own `Settings`, gets
what it asked for. A value that is not a positive number, or a `PILOT_TUI_*` name that is no
setting (a typo would silently keep the default), is bad input: one line, exit code 2.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

PREFIX = "PILOT_TUI_"
# `PILOT_TUI_*` variables that are no timeout, read where they are used.
OTHER_VARIABLES = (
    "PILOT_TUI_LAUNCHER",  # core/launch.py
    "PILOT_TUI_NO_TEMPLATE",  # runner/processes/template.py
)


class SettingsError(ValueError):
    """A `PILOT_TUI_*` variable that cannot be used; the message is one line naming it."""


@dataclass(frozen=True)
class Settings:
    """The session's timeouts, in seconds."""

    # A runner sends counters every half second while a step runs: this long a silence is a hang,
    # and the runner is killed (the step's row says so).
    silence_s: float = 120.0
    # Opening a campaign imports torch and builds the task (a large model can take minutes).
    open_timeout_s: float = 600.0
    # After a cancel, the time a phase gets to stop by itself before the runner is killed.
    cancel_grace_s: float = 10.0
    # Past a phase's declared `time_s`, the time the runner gets to stop it and send its row
    # before the view kills it (code stuck in C ignores the runner's own deadline).
    hung_grace_s: float = 10.0
    # How long one read of the link waits before the session checks its clocks again.
    poll_s: float = 0.5

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The defaults, with every `PILOT_TUI_<FIELD>` variable of `env` (default: os.environ)."""
        env = os.environ if env is None else env
        names = {env_name(f.name): f.name for f in dataclasses.fields(cls)}
        values: dict[str, float] = {}
        for var, text in env.items():
            if not var.startswith(PREFIX) or var in OTHER_VARIABLES:
                continue
            if var not in names:
                close = difflib.get_close_matches(var, names, n=1)
                hint = f"did you mean {close[0]}? " if close else ""
                raise SettingsError(f"{var}: not a setting ({hint}settings: {', '.join(names)})")
            values[names[var]] = _seconds(var, text)
        return cls(**values)

    def described(self) -> dict[str, float]:
        """Each setting by its environment variable, as in effect (for docs and a record)."""
        return {env_name(f.name): getattr(self, f.name) for f in dataclasses.fields(self)}


def env_name(field_name: str) -> str:
    """`silence_s` -> `PILOT_TUI_SILENCE_S`."""
    return PREFIX + field_name.upper()


def _seconds(var: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{var}: expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise SettingsError(f"{var}: must be a finite number of seconds > 0, got {text!r}")
    return value
