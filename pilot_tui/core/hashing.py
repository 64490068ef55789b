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


def directory_files(path: Path) -> list[Path]:
    """Every regular file under a directory artifact, in a fixed order (relative names sorted)."""
    return sorted((p for p in path.rglob("*") if p.is_file()), key=lambda p: p.relative_to(path).as_posix())


def directory_sha256(path: Path) -> tuple[str, int, int]:
    """(sha256, total bytes, file count) of a directory artifact (a sharded checkpoint).

    The hash covers each file's relative name, size and sha256: a file added, removed, renamed or
    changed changes it, so one recorded figure vouches for every shard (R17).
    """
    h = hashlib.sha256()
    total = 0
    files = directory_files(path)
    for f in files:
        size = f.stat().st_size
        total += size
        h.update(f"{f.relative_to(path).as_posix()}\0{size}\0{sha256_file(f)}\n".encode())
    return h.hexdigest(), total, len(files)


def artifact_entry(path: Path, kind: str, **extra: Any) -> dict[str, Any]:
    """The record's description of an artifact, written right after the file (or the directory of
    a sharded checkpoint) is complete."""
    if path.is_dir():
        digest, size, files = directory_sha256(path)
        return {"path": str(path), "kind": kind, "size": size, "sha256": digest, "files": files} | extra
    return {"path": str(path), "kind": kind, "size": path.stat().st_size, "sha256": sha256_file(path)} | extra
