"""Faults recognised by what they are, not by the library's wording (R10, R24).

A full disk surfaces as `OSError(ENOSPC)` from Python, but as `RuntimeError: [enforce fail at
inline_container.cc:…] unexpected pos` from `torch.save`; a CPU allocation failure as
`RuntimeError: … DefaultCPUAllocator: can't allocate memory` or `MemoryError`. Rows name them
plainly. Whether an error is an out-of-memory at all is `runner/memory/oom.py`'s `is_oom` (which knows
the CPU allocator's wording too); `is_cpu_oom` only tells the host's apart, for the row's words.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

# What torch's writers say when a write came up short (a full disk, the usual cause).
_SHORT_WRITE = ("unexpected pos", "PytorchStreamWriter failed writing", "file write failed")
_CPU_OOM = ("DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough memory")
# Less than this free in the folder, and a short write is put down to a full disk.
NEARLY_FULL_BYTES = 64 << 20


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def is_cpu_oom(exc: BaseException) -> bool:
    """True for an allocation the host could not satisfy (under a memory limit, say)."""
    return any(isinstance(e, MemoryError) or any(m in str(e) for m in _CPU_OOM) for e in _chain(exc))


def free_bytes(folder: Path) -> int | None:
    """Free space in `folder` (or its nearest existing parent); None when unknown."""
    for p in (folder, *folder.parents):
        if p.exists():
            try:
                return shutil.disk_usage(p).free
            except OSError:
                return None
    return None


def is_disk_full(exc: BaseException, folder: Path | None = None) -> bool:
    """ENOSPC/EDQUOT anywhere in the chain, or torch's short-write error on a nearly full disk."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(m in str(e) for m in _SHORT_WRITE):
            free = free_bytes(folder) if folder is not None else None
            return free is None or free < NEARLY_FULL_BYTES
    return False


def disk_full_reason(folder: Path, phase: str) -> str:
    """One line for a row: where the disk is full, and how much is left."""
    free = free_bytes(folder)
    left = f" ({free / 2**20:.0f} MiB free)" if free is not None else ""
    return f"disk full: no space left on the device of {folder}{left} while {phase} was writing"
