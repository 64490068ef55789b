"""The software and hardware this pilot ran on, for the record's [environment]."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from typing import Any

import torch

from .. import __version__
from ..core.revision import code_revision


def describe(device: torch.device) -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "pilot_tui": __version__,
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "",
        "device": str(device),
        "cpu_count": os.cpu_count() or 0,
        "torch_threads": torch.get_num_threads(),
        "executable": sys.executable,
        "libraries": _versions("numpy", "safetensors", "psutil", "tomli-w"),
        "code_revision": code_revision(),
        "devices": gpus(),
    }
    env |= numerics()
    env["env_vars"] = env_vars()
    return env


# Variables that change what a GPU step costs or which GPU it runs on; "" when unset.
ENV_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "CUBLAS_WORKSPACE_CONFIG",
    "NVIDIA_TF32_OVERRIDE",
    "CUDA_LAUNCH_BLOCKING",
)


def env_vars() -> dict[str, str]:
    """The environment variables that change GPU time or memory, as this runner saw them."""
    return {name: os.environ.get(name, "") for name in ENV_VARS}


def numerics() -> dict[str, Any]:
    """The switches that change fp32 speed and reproducibility: TF32, cuDNN, deterministic mode.

    TF32 runs fp32 matmuls and convolutions on tensor cores with a 10-bit mantissa: several
    times faster on Ampere and later. A step timed without it is not the step a run with it
    will take (the plan says so, `plan.tf32_note`).
    """
    cudnn = torch.backends.cudnn
    return {
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "tf32_cudnn": bool(cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn_benchmark": bool(cudnn.benchmark),
        "cudnn_deterministic": bool(cudnn.deterministic),
        "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
        "deterministic_warn_only": bool(torch.is_deterministic_algorithms_warn_only_enabled()),
    }


def _versions(*names: str) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def gpus() -> list[dict[str, Any]]:
    """Every visible GPU with the same fields, so a mixed machine is visible (R6)."""
    out = []
    if not torch.cuda.is_available():
        return out
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append(
            {
                "index": i,
                "name": p.name,
                "memory_mb": round(p.total_memory / 2**20),
                "capability": f"{p.major}.{p.minor}",
                # Native bf16 arrived with compute capability 8.0 (Ampere).
                "bf16": p.major >= 8,
                # Which physical GPU this index is: CUDA_VISIBLE_DEVICES renumbers them, the
                # UUID and the PCI bus id do not (the Counters pane matches NVML by UUID).
                "uuid": device_uuid(p),
                "pci_bus_id": pci_bus_id(p),
            }
        )
    return out


def device_uuid(props: Any) -> str:
    """NVML's spelling of a device's UUID (`GPU-…`), or "" when torch does not expose it."""
    uuid = getattr(props, "uuid", None)
    if uuid is None:
        return ""
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def pci_bus_id(props: Any) -> str:
    """`domain:bus:device.0` as NVML and nvidia-smi print it, or "" when unknown."""
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return ""
    domain = int(getattr(props, "pci_domain_id", 0) or 0)
    device = int(getattr(props, "pci_device_id", 0) or 0)
    return f"{domain:08X}:{int(bus):02X}:{device:02X}.0"
