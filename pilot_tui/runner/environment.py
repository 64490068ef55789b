"""The software and hardware this pilot ran on, for the record's [environment]."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from typing import Any

import torch

from .. import __version__
from ..revision import code_revision


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
    return env


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
            }
        )
    return out
