"""Which exceptions are an out-of-memory (R10): one function, so every phase classifies alike.

PyTorch raises `torch.OutOfMemoryError` for the caching allocator, but a library that allocates
its own workspace fails with its own status: cuBLAS (`CUBLAS_STATUS_ALLOC_FAILED`) and cuDNN
(`CUDNN_STATUS_ALLOC_FAILED`, or no algorithm whose workspace fits) surface as plain
`RuntimeError`s. They are out-of-memory results too, not crashes.
"""

from __future__ import annotations

import torch

# Lower-case fragments of error messages that mean "not enough device (or host) memory".
OOM_MARKERS = (
    "out of memory",
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
    "cusolver_status_alloc_failed",
    "cufft_alloc_failed",
    # cuDNN's picker fails this way when no algorithm's workspace fits in what is left.
    "unable to find a valid cudnn algorithm",
    "failed to allocate memory",
    # The host: torch's CPU allocator under a memory limit (ulimit, a cgroup without swap).
    "defaultcpuallocator: can't allocate memory",
    "defaultcpuallocator: not enough memory",
)


def is_oom(exc: BaseException) -> bool:
    """True when `exc` says the device (or a library's workspace on it) ran out of memory."""
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    text = str(exc).lower()
    return any(marker in text for marker in OOM_MARKERS)
