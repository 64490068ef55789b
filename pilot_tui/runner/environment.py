"""The software and hardware this pilot ran on, for the record's [environment]."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
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
        "libraries": _versions("numpy", "safetensors", "psutil", "tomli-w"),
        "code_revision": code_revision(Path(__file__).resolve().parents[2]),
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


def _versions(*names: str) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def code_revision(folder: Path) -> str:
    """The git commit of a source checkout, with `+dirty` for local changes; "" outside git."""
    try:
        head = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if head.returncode != 0:
            return ""
        dirty = subprocess.run(
            ["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
