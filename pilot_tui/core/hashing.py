"""Provenance of files the tool writes: path, size and sha256 (R17). Pure, no torch."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def artifact_entry(path: Path, kind: str, **extra: Any) -> dict[str, Any]:
    """The record's description of an artifact, written right after the file is complete."""
    return {"path": str(path), "kind": kind, "size": path.stat().st_size, "sha256": sha256_file(path)} | extra
