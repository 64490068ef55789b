"""A CUDA error that poisons the context: after it, nothing in this process can use the GPU.

A device-side assert (a label or token id past the vocabulary), an illegal address or a launch
failure is *sticky*: every later CUDA call in the process — `synchronize`, `empty_cache`, the
next phase — raises it again. The only way on is a new process. The step that hit it gets a
fail row saying so, and the runner ends after that row (runner/main.py) so the session starts a
fresh one for the next step.
"""

from __future__ import annotations

from .oom import is_oom

# Lower-case fragments of the CUDA errors documented as leaving the context unusable.
STICKY_MARKERS = (
    "device-side assert",
    "illegal memory access",
    "illegal instruction",
    "misaligned address",
    "unspecified launch failure",
    "an illegal address",
    "invalid program counter",
    "hardware stack error",
    "cuda error: launch failure",
    "cublas_status_execution_failed",
    "cudnn_status_execution_failed",
    "cudnn_status_mapping_error",
    "context is destroyed",
)

POISONED = "CUDA context poisoned"


def is_sticky(exc: BaseException) -> bool:
    """True when `exc` is a CUDA error after which the process's context cannot be used again."""
    if is_oom(exc):
        return False
    text = str(exc).lower()
    return any(marker in text for marker in STICKY_MARKERS)
