"""The fence around every phase: the process's global state put back as the phase found it (R29).

A phase runs inside the process that holds the training under test, so whatever it leaves behind
becomes part of the next phase's training: an LR run that seeds the global RNG with its own seed
makes the resume's run A shuffle with that seed (accelerate's sampler seeds itself from
`torch.initial_seed()` when `train()` builds the loader), and the resume then differs from a fresh
process that did not run the board. What the fence holds: the python, numpy, torch CPU and CUDA
RNGs (a generator's state holds its initial seed), the `torch.backends` flags and the deterministic
mode, the default dtype, grad and anomaly mode, torch's thread count, the garbage collector's
switch and thresholds, the environment variables and the working directory.

It never creates a CUDA context: the CUDA RNGs are held only once CUDA is initialised. What cannot
be put back (torch's inter-op thread count, fixed once set) is named, and the row says so.
"""

from __future__ import annotations

import gc
import os
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


def _flags() -> dict[str, Any]:
    cuda, cudnn = torch.backends.cuda, torch.backends.cudnn
    return {
        "cudnn.enabled": cudnn.enabled,
        "cudnn.benchmark": cudnn.benchmark,
        "cudnn.deterministic": cudnn.deterministic,
        "cudnn.allow_tf32": cudnn.allow_tf32,
        "cuda.matmul.allow_tf32": cuda.matmul.allow_tf32,
        "cuda.matmul.allow_fp16_reduced_precision_reduction": cuda.matmul.allow_fp16_reduced_precision_reduction,
        "cuda.matmul.allow_bf16_reduced_precision_reduction": cuda.matmul.allow_bf16_reduced_precision_reduction,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "flash_sdp": cuda.flash_sdp_enabled(),
        "mem_efficient_sdp": cuda.mem_efficient_sdp_enabled(),
        "math_sdp": cuda.math_sdp_enabled(),
        "default_dtype": torch.get_default_dtype(),
        "grad_enabled": torch.is_grad_enabled(),
        "anomaly": torch.is_anomaly_enabled(),
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "gc_enabled": gc.isenabled(),
        "gc_threshold": gc.get_threshold(),
    }


def _set_flags(flags: dict[str, Any]) -> list[str]:
    """Put the flags back; the names of those that cannot be."""
    cuda, cudnn = torch.backends.cuda, torch.backends.cudnn
    cudnn.enabled = flags["cudnn.enabled"]
    cudnn.benchmark = flags["cudnn.benchmark"]
    cudnn.deterministic = flags["cudnn.deterministic"]
    cudnn.allow_tf32 = flags["cudnn.allow_tf32"]
    cuda.matmul.allow_tf32 = flags["cuda.matmul.allow_tf32"]
    cuda.matmul.allow_fp16_reduced_precision_reduction = flags[
        "cuda.matmul.allow_fp16_reduced_precision_reduction"
    ]
    cuda.matmul.allow_bf16_reduced_precision_reduction = flags[
        "cuda.matmul.allow_bf16_reduced_precision_reduction"
    ]
    torch.set_float32_matmul_precision(flags["float32_matmul_precision"])
    torch.use_deterministic_algorithms(
        flags["deterministic_algorithms"], warn_only=flags["deterministic_warn_only"]
    )
    cuda.enable_flash_sdp(flags["flash_sdp"])
    cuda.enable_mem_efficient_sdp(flags["mem_efficient_sdp"])
    cuda.enable_math_sdp(flags["math_sdp"])
    torch.set_default_dtype(flags["default_dtype"])
    torch.set_grad_enabled(flags["grad_enabled"])
    torch.set_anomaly_enabled(flags["anomaly"])
    if torch.get_num_threads() != flags["threads"]:
        torch.set_num_threads(flags["threads"])
    (gc.enable if flags["gc_enabled"] else gc.disable)()
    gc.set_threshold(*flags["gc_threshold"])
    lost = []
    if torch.get_num_interop_threads() != flags["interop_threads"]:
        lost.append("torch's inter-op thread count (fixed once set)")
    return lost


@dataclass(frozen=True)
class GlobalState:
    """What a phase may change in the process and must leave as it found it."""

    python_rng: Any
    numpy_rng: Any
    torch_rng: torch.Tensor
    cuda_rng: tuple[torch.Tensor, ...] | None
    flags: dict[str, Any]
    env: dict[str, str]
    cwd: str

    @classmethod
    def now(cls) -> GlobalState:
        try:
            cuda = tuple(torch.cuda.get_rng_state_all()) if torch.cuda.is_initialized() else None
        except Exception:  # a context a fault poisoned: nothing of it can be read, nor put back
            cuda = None
        return cls(
            random.getstate(),
            np.random.get_state(),
            torch.get_rng_state(),
            cuda,
            _flags(),
            dict(os.environ),
            os.getcwd(),
        )

    def restore(self) -> list[str]:
        """Put everything back; the names of what could not be."""
        random.setstate(self.python_rng)
        np.random.set_state(self.numpy_rng)
        torch.set_rng_state(self.torch_rng)
        lost = _set_flags(self.flags)
        if self.cuda_rng is not None:
            try:
                torch.cuda.set_rng_state_all(list(self.cuda_rng))
            except Exception:  # the phase poisoned the context: the row says so already
                lost.append("the CUDA RNG (the CUDA context failed)")
        if dict(os.environ) != self.env:
            os.environ.clear()
            os.environ.update(self.env)
        try:
            if os.getcwd() != self.cwd:
                os.chdir(self.cwd)
        except OSError as exc:  # the folder is gone: say so, never fail the row for it
            lost.append(f"the working directory {self.cwd} ({exc.strerror})")
        return lost

    def differences(self, other: GlobalState) -> list[str]:
        """What differs between two snapshots, by name."""
        out = []
        if self.python_rng != other.python_rng:
            out.append("python RNG")
        a, b = self.numpy_rng, other.numpy_rng
        if a[0] != b[0] or not np.array_equal(a[1], b[1]) or tuple(a[2:]) != tuple(b[2:]):
            out.append("numpy RNG")
        if not torch.equal(self.torch_rng, other.torch_rng):
            out.append(f"torch RNG (initial seed {_seed_of(self.torch_rng)} -> {_seed_of(other.torch_rng)})")
        if (
            self.cuda_rng is not None
            and other.cuda_rng is not None
            and not all(torch.equal(x, y) for x, y in zip(self.cuda_rng, other.cuda_rng, strict=True))
        ):
            out.append("CUDA RNG")
        out += [
            f"{k}: {self.flags[k]!r} -> {other.flags[k]!r}"
            for k in self.flags
            if self.flags[k] != other.flags[k]
        ]
        keys = sorted(set(self.env) | set(other.env))
        out += [f"environment {k}" for k in keys if self.env.get(k) != other.env.get(k)]
        if self.cwd != other.cwd:
            out.append(f"working directory {self.cwd} -> {other.cwd}")
        return out


def _seed_of(state: torch.Tensor) -> int:
    """The initial seed a CPU generator state holds (what `torch.initial_seed()` returns)."""
    generator = torch.Generator()
    generator.set_state(state)
    return generator.initial_seed()
