"""The git revision of the pilot-tui code, for the record and the archive (R16). Pure: no torch."""

from __future__ import annotations

import subprocess
from pathlib import Path


def code_revision(where: Path | None = None) -> str:
    """The git revision of the pilot-tui code (with `+dirty` for local changes), or ""."""
    where = where or Path(__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if rev.returncode != 0:
            return ""
        status = subprocess.run(
            ["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    dirty = "+dirty" if status.returncode == 0 and status.stdout.strip() else ""
    return rev.stdout.strip() + dirty
