"""NVML's view of each CUDA device, recorded beside the allocator's in every phase row (R6).

NVML sees what the caching allocator does not: the CUDA context (hundreds of MiB) and other
processes. Reads fail soft: a row never fails because NVML cannot be read; the key is left out.
"""

from __future__ import annotations

from typing import Any

import torch

MIB = 1024 * 1024


class NvmlView:
    """Maps torch's CUDA indices to NVML handles by UUID (CUDA_VISIBLE_DEVICES may reorder them)."""

    def __init__(self) -> None:
        self._lib: Any = None
        self._handles: dict[int, Any] = {}
        try:  # no NVIDIA library or driver: the view says so and reads the CPU process instead
            import pynvml

            pynvml.nvmlInit()
            self._lib = pynvml
        except Exception:
            return
        for i in range(torch.cuda.device_count()):
            handle = self._handle_for(i)
            if handle is not None:
                self._handles[i] = handle

    def _handle_for(self, index: int) -> Any:
        props = torch.cuda.get_device_properties(index)
        uuid = getattr(props, "uuid", None)
        try:
            if uuid is not None:
                return self._lib.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
            return self._lib.nvmlDeviceGetHandleByIndex(index)
        except Exception:
            return None

    def memory(self, index: int) -> dict[str, float]:
        """`nvml_used_mb` and `nvml_total_mb` of one device, or {} when NVML cannot say."""
        handle = self._handles.get(index)
        if handle is None:
            return {}
        try:
            info = self._lib.nvmlDeviceGetMemoryInfo(handle)
        except Exception:
            return {}
        return {"nvml_used_mb": info.used / MIB, "nvml_total_mb": info.total / MIB}
