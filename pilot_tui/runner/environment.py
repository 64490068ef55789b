"""The software and hardware this pilot ran on, for the record's [environment]."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

import torch

from .. import __version__


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
    }
    devices = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            devices.append(
                {
                    "index": i,
                    "name": p.name,
                    "memory_mb": round(p.total_memory / 2**20),
                    "capability": f"{p.major}.{p.minor}",
                }
            )
    env["devices"] = devices
    return env
