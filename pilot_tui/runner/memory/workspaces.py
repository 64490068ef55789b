"""What the device's libraries keep allocated outside any tensor a model creates (R23).

cuBLAS and cuBLASLt take their workspaces from PyTorch's caching allocator, one per (handle,
stream), at the first matrix multiply, and keep them for the life of the process: every measured
phase's peak allocated holds them, while a fake-tensor run never sees them (on a 3.2M-parameter
model they were most of the measured peak). They are measured here once per device: the
workspaces are dropped, the multiplies a training step launches run once, and what stays
allocated afterwards is theirs. The CUDA context and NCCL's buffers live outside the allocator
(NVML sees them, `memory_allocated` does not) and are not part of this figure.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MIB = 1024 * 1024
LEFT_OUT = "the CUDA context and NCCL's buffers (outside the allocator: NVML's figure, not allocated)"


@dataclass(frozen=True)
class Workspaces:
    """Bytes held after the first multiplies, and how that figure was obtained."""

    bytes: int
    how: str

    def details(self) -> dict[str, object]:
        return {"library_workspaces_mb": round(self.bytes / MIB, 3), "library_workspaces": self.how}


def _gemms(device: torch.device, dtypes: tuple[torch.dtype, ...]) -> None:
    """One multiply of each kind a step launches: a plain GEMM and a linear with bias (cuBLASLt)."""
    for dtype in dtypes:
        a = torch.ones(64, 64, device=device, dtype=dtype)
        bias = torch.ones(64, device=device, dtype=dtype)
        (a @ a).sum()
        torch.nn.functional.linear(a, a, bias).sum()


def measure(device: torch.device, precisions: tuple[str, ...] = ("fp32",)) -> Workspaces:
    """The library workspaces on `device` for the campaign's precisions (0 on a CPU)."""
    if device.type != "cuda":
        return Workspaces(0, "none on a CPU: its BLAS keeps no allocator workspace")
    dtypes = {torch.float32}
    for p in precisions:
        if p in ("bf16", "fp16"):
            dtypes.add(torch.bfloat16 if p == "bf16" else torch.float16)
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    torch.cuda.synchronize(device)
    if clear is None:
        return Workspaces(0, "not measured: this torch cannot drop the cuBLAS workspaces")
    clear()
    before = torch.cuda.memory_allocated(device)
    _gemms(device, tuple(sorted(dtypes, key=str)))
    torch.cuda.synchronize(device)
    held = max(0, torch.cuda.memory_allocated(device) - before)
    return Workspaces(held, f"measured on {torch.cuda.get_device_name(device)} after one multiply per dtype")
