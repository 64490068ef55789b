"""How the runner's processes end: never as orphans of a view that died."""

from __future__ import annotations

import contextlib
import ctypes
import signal


def die_with_parent() -> None:
    """Linux: if the parent process is killed, the kernel kills this one too (no orphan)."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: nothing to set
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
