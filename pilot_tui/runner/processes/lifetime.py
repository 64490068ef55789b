"""How the runner's processes end: never as orphans of a view that died."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import signal


def die_with_parent() -> None:
    """Linux: if the parent process is killed, the kernel kills this one too (no orphan)."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: nothing to set
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def exit_without_collecting() -> None:
    """Called last before a runner-side process returns from main: nothing it holds is needed
    any more, so the heap is frozen out of the garbage collector. The interpreter's exit would
    otherwise walk it once more: with torch and torch._dynamo loaded that is ~0.5 s of CPU per
    process, which whoever waits for the exit pays (a session's close, a fresh process's
    result). atexit handlers still run and open files are still flushed."""
    gc.freeze()
