"""Why the runner process died, in words (R10, R24). Pure: reads /proc and /sys only.

A kernel out-of-memory kill reaches the view only as "signal 9". The memory cgroup counts its
OOM kills (`oom_kill` in cgroup v2's `memory.events`, v1's `memory.oom_control`): read before and
after, a rise names the killer.
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path


def _cgroup_files() -> list[Path]:
    files = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return files
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if controllers == "":  # cgroup v2
            files.append(Path("/sys/fs/cgroup") / rel / "memory.events")
        elif "memory" in controllers.split(","):
            files.append(Path("/sys/fs/cgroup/memory") / rel / "memory.oom_control")
    return files


def oom_kills() -> int | None:
    """The OOM kills counted in this process's memory cgroup so far; None when unreadable."""
    for f in _cgroup_files():
        try:
            for line in f.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return None


def death_reason(status: str, phase: str, oom_before: int | None, rss_mb: float | None = None) -> str:
    """One line for the row of a phase whose runner died; `status` as the link says it
    ("signal 9", "exit code 1", "" when unknown)."""
    how = status or "it exited"
    if status.startswith("signal "):
        with contextlib.suppress(ValueError):
            how = f"{status} ({signal.Signals(int(status.split()[1])).name})"
    last = f"; it held {rss_mb:.0f} MiB at the last sample" if rss_mb else ""
    if status == f"signal {int(signal.SIGKILL)}":
        after = oom_kills()
        if oom_before is not None and after is not None and after > oom_before:
            return (
                f"out of memory (host): the kernel's OOM killer ended the runner ({how}) during {phase}{last}; "
                "the next step starts a new one"
            )
        return (
            f"the runner process died ({how}) during {phase}: killed by the kernel's OOM killer if memory ran "
            f"out, or from outside{last}; the next step starts a new one"
        )
    return f"the runner process died ({how}) during {phase}; the next step starts a new one"
