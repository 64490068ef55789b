"""The replay outputs before the save, kept on disk beside the exported weights (R16).

The final check compares them with the reloaded artifact's outputs. Held only in the runner's
memory they were lost when the runner died between `export` and `final`; on disk (safetensors:
logits as tensors, the rest as JSON metadata, hash in the record) a new runner reads them back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from ...core.atomic import write_atomic
from ..safe_load import load_tensors_and_metadata
from .replay import ReplayOutput

FIELDS = ("input", "output", "ids", "how", "error")


def save_replays(replays: Sequence[ReplayOutput], path: Path) -> None:
    """Write the outputs atomically: logits as `logits/<i>`, the other fields as metadata."""

    tensors = {
        f"logits/{i}": c.logits.detach().cpu().contiguous()
        for i, c in enumerate(replays)
        if c.logits is not None
    }
    meta = {"replays": json.dumps([{k: getattr(c, k) for k in FIELDS} for c in replays])}
    write_atomic(path, lambda tmp: save_file(tensors, tmp, metadata=meta))


def load_replays(entry: Mapping[str, Any]) -> list[ReplayOutput]:
    """Read them back, the file checked against its recorded size and sha256 first (R17)."""
    # UnsafeLoadError when the bytes changed since they were recorded.
    tensors, meta = load_tensors_and_metadata(entry["path"], entry)
    # "controls": the key files written before the rename hold.
    rows = json.loads(meta.get("replays") or meta.get("controls") or "[]")
    return [
        ReplayOutput(
            **{k: row.get(k, "" if k != "ids" else []) for k in FIELDS}, logits=tensors.get(f"logits/{i}")
        )
        for i, row in enumerate(rows)
    ]
