"""The one place tests wait: on a condition, with a bound that only guards against a hang.

A wait on a duration asserts the machine is fast enough; a wait on a condition does not.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.pilot import Pilot

# Generous: it only fires when something is really stuck (other tests share the 2 cores).
BOUND_S = 120.0


async def wait_for(
    pilot: Pilot, condition: Callable[[], object], what: str, bound_s: float = BOUND_S
) -> None:
    """Let the app run until `condition()` is true; fail naming `what` if it never becomes so."""
    deadline = time.monotonic() + bound_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {bound_s:g} s waiting for {what}")
        await pilot.pause(0.05)
