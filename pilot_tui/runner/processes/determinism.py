"""Reproducible CUDA runs for the resume comparison (R15), and what could not be made so.

cuBLAS picks its reduction split from a workspace whose size must be fixed before its first
handle is made: `CUBLAS_WORKSPACE_CONFIG` is put in the environment of the runner and of every
worker before torch loads. The resume comparison runs then use deterministic algorithms; an op
with no deterministic CUDA kernel (e.g. some `index_add_`/`scatter_add_` paths, memory-efficient
attention's backward) only warns, and the warnings are collected so the comparison can say which
kernels forced a tolerance instead of bitwise equality.

Nothing here imports torch at module level: the runner imports it before torch is loaded.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator, MutableMapping

from ...core.reasons import first_line

# PyTorch's documented setting for deterministic cuBLAS (":16:8" is smaller and slower).
CUBLAS_WORKSPACE = ":4096:8"
SPAWN_ENV = {"CUBLAS_WORKSPACE_CONFIG": CUBLAS_WORKSPACE}

_NO_KERNEL = re.compile(r"^(?P<op>.+?) does not have a deterministic implementation")


def apply_spawn_env(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Add the reproducibility settings to a process environment; a user's own value wins."""
    for key, value in SPAWN_ENV.items():
        env.setdefault(key, value)
    return env


def nondeterministic_op(message: str) -> str | None:
    """The op a PyTorch determinism warning names, or None for any other warning."""
    first = first_line(message)
    found = _NO_KERNEL.match(first)
    if found:
        return found.group("op")
    lowered = first.lower()
    if any(m in lowered for m in ("non-deterministic", "nondeterministic", "not deterministic")):
        if "memory efficient attention" in lowered or "memory-efficient attention" in lowered:
            return "memory-efficient attention backward"
        return first[:120]
    return None


@contextlib.contextmanager
def deterministic() -> Iterator[list[str]]:
    """Run the block with deterministic algorithms (warn-only) and cuDNN's deterministic mode.

    Yields a list filled, when the block ends, with the ops that had no deterministic kernel.
    The previous settings come back afterwards: the other phases measure the user's setup.
    """
    import torch  # the runner's main imports this module to set the spawn environment before torch

    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    ops: list[str] = []
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield ops
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[2], saved[3]
    for w in caught:
        op = nondeterministic_op(str(w.message))
        if op is not None and op not in ops:
            ops.append(op)
        elif op is None:
            # Not ours to swallow: shown as it would have been.
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
