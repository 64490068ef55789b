"""The only way the tool reads a tensor file back (R17).

Every load goes through here and follows three rules, with no fallback ever:

1. the torch in use is ≥ 2.6 (older `weights_only` loading had a remote-code-execution hole);
2. the file is the one the record describes: its sha256 (and size, when known) is checked against
   the provenance written when the file was made, *before* a single byte is deserialised;
3. it is read with `torch.load(..., weights_only=True)` (plain tensors and numbers only) or with
   safetensors (no code at all). A file that needs anything else is refused, not unpickled.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from ..core.hashing import directory_sha256, sha256_file

MIN_TORCH = (2, 6)


class UnsafeLoadError(Exception):
    """A load was refused: wrong hash, unknown provenance, unsafe content or too old a torch."""


def torch_version_tuple(version: str) -> tuple[int, int]:
    """`"2.13.0+cpu"` -> `(2, 13)`; an unreadable version reads as `(0, 0)` (refused)."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def check_torch_version(version: str | None = None) -> None:
    """Refuse to load anything with a torch older than 2.6."""
    version = version or torch.__version__
    if torch_version_tuple(version) < MIN_TORCH:
        raise UnsafeLoadError(
            f"torch {version} is older than {MIN_TORCH[0]}.{MIN_TORCH[1]}: its weights_only loading "
            "could run code (CVE-2025-32434); upgrade torch before loading any checkpoint"
        )


def verify_provenance(path: str | Path, provenance: Mapping[str, Any]) -> Path:
    """Check that `path` is the file `provenance` (a record's artifact entry) describes.

    The entry must name a sha256; the path must match the entry's path, and the file's size and
    hash must match what was recorded when it was written.
    """
    p = Path(path)
    expected = str(provenance.get("sha256") or "")
    if not re.fullmatch(r"[0-9a-f]{64}", expected):
        raise UnsafeLoadError(f"{p}: refused: no recorded sha256 for this file (unknown provenance)")
    recorded_path = provenance.get("path")
    if recorded_path and Path(recorded_path).resolve() != p.resolve():
        raise UnsafeLoadError(f"{p}: refused: the record's provenance is for {recorded_path}")
    if p.is_dir():
        return _verify_directory(p, expected, provenance)
    if not p.is_file():
        raise UnsafeLoadError(f"{p}: refused: file not found")
    size = provenance.get("size")
    if size is not None and p.stat().st_size != int(size):
        raise UnsafeLoadError(
            f"{p}: refused: size {p.stat().st_size} bytes differs from the recorded {int(size)} bytes"
        )
    actual = sha256_file(p)
    if actual != expected:
        raise UnsafeLoadError(
            f"{p}: refused: sha256 {actual[:16]}… differs from the recorded {expected[:16]}… "
            "(the file changed since it was written)"
        )
    return p


def _verify_directory(p: Path, expected: str, provenance: Mapping[str, Any]) -> Path:
    """A sharded checkpoint: one recorded hash over every file's name, size and sha256."""
    actual, size, files = directory_sha256(p)
    if provenance.get("files") is not None and files != int(provenance["files"]):
        raise UnsafeLoadError(
            f"{p}: refused: {files} files where the record holds {int(provenance['files'])}"
        )
    if provenance.get("size") is not None and size != int(provenance["size"]):
        raise UnsafeLoadError(
            f"{p}: refused: {size} bytes differ from the recorded {int(provenance['size'])} bytes"
        )
    if actual != expected:
        raise UnsafeLoadError(
            f"{p}: refused: its files' sha256 {actual[:16]}… differs from the recorded {expected[:16]}… "
            "(a shard changed since it was written)"
        )
    return p


def load_checkpoint(
    path: str | Path, provenance: Mapping[str, Any], map_location: str | torch.device = "cpu"
) -> dict[str, Any]:
    """A training checkpoint: provenance checked, then `torch.load(weights_only=True)`."""
    check_torch_version()
    p = verify_provenance(path, provenance)
    try:
        obj = torch.load(p, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError, ValueError) as exc:
        # weights_only refused a global it does not allow: the file wants to run code.
        raise UnsafeLoadError(
            f"{p}: refused: not plain tensors and numbers ({_why(exc)}); it is never unpickled"
        ) from None
    if not isinstance(obj, dict):
        raise UnsafeLoadError(f"{p}: refused: a checkpoint must hold a dict, found {type(obj).__name__}")
    return obj


def _why(exc: BaseException) -> str:
    """The one useful sentence of torch's refusal, without its advice to load unsafely."""
    text = str(exc)
    m = re.search(r"Unsupported global: GLOBAL (\S+)", text)
    if m:
        return f"it asks for {m.group(1)}, which plain data never needs"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:200]


def load_tensors(
    path: str | Path, provenance: Mapping[str, Any], device: str = "cpu"
) -> dict[str, torch.Tensor]:
    """A safetensors file (no code can run): provenance checked, then read."""
    check_torch_version()
    p = verify_provenance(path, provenance)
    try:
        return load_file(str(p), device=device)
    except (SafetensorError, OSError, ValueError) as exc:
        raise UnsafeLoadError(f"{p}: refused: not a valid safetensors file ({exc})") from None


def load_tensors_and_metadata(
    path: str | Path, provenance: Mapping[str, Any]
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """`load_tensors`, plus the file's string metadata (safetensors' header: no code can run)."""
    tensors = load_tensors(path, provenance)
    try:
        with safe_open(str(path), framework="pt") as fh:
            return tensors, dict(fh.metadata() or {})
    except (SafetensorError, OSError, ValueError) as exc:
        raise UnsafeLoadError(f"{path}: refused: not a valid safetensors file ({exc})") from None
