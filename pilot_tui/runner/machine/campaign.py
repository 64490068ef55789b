"""What a campaign asks of the machine: its loader, its ranks, where it writes and how much.

Read from the spec and from rows already measured (a `save` row's checkpoint, else the `estimate`
row's weights and optimizer state); a figure the campaign does not give is left None and the
check says what was not known, rather than guessing it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...core.spec import LoadedSpec
from .check import MachineRequest, default_places
from .host import Place

MIB = 2**20


def checkpoint_bytes(rows: Sequence[dict[str, Any]]) -> tuple[int | None, str]:
    """One checkpoint's bytes: measured by a save row, else weights + optimizer state from the
    estimate row (what a full training checkpoint holds), else None with the reason."""
    for row in reversed(rows):
        if row.get("name") == "save" and row.get("variant", "control") == "control":
            size = (row.get("details") or {}).get("artifact", {}).get("size")
            if isinstance(size, int | float) and size > 0:
                return int(size), "checkpoint measured by save"
    for row in reversed(rows):
        if row.get("name") != "estimate":
            continue
        for entry in (row.get("details") or {}).get("estimates", []):
            if entry.get("name") == "control" and entry.get("parameters_mb") is not None:
                mb = sum(
                    float(entry.get(k) or 0) for k in ("parameters_mb", "buffers_mb", "optimizer_state_mb")
                )
                return int(mb * MIB), "weights + optimizer state from the estimate"
    return None, "no save or estimate row yet"


def planned_saves(loaded: LoadedSpec) -> tuple[int, str]:
    """Checkpoints on disk at the worst moment of the real run, and how that count was reached."""
    p, b = loaded.spec.plan, loaded.spec.batch
    epochs = max(1, p.epochs)
    if p.save_every and p.dataset_size:
        per_update = b.microbatch * b.accumulation * max(1, b.replicas)
        updates = math.ceil(p.dataset_size * epochs / per_update)
        saves, how = max(1, updates // p.save_every), f"a save every {p.save_every} of {updates} updates"
    elif p.checkpoints:
        saves, how = p.checkpoints, f"{p.checkpoints} checkpoints"
    else:
        saves, how = epochs, f"one per epoch × {epochs}"
    if p.keep and p.keep + 1 < saves:
        # Rotating: the next one is written before the oldest goes.
        return p.keep + 1, f"{how}, {p.keep} kept + 1 being written"
    return saves, f"{how}, every one kept"


def checkpoint_folder(loaded: LoadedSpec, records_dir: Path) -> Path:
    """`plan.checkpoint_dir` relative to the campaign file, else the records' folder."""
    declared = loaded.spec.plan.checkpoint_dir
    if declared:
        return (Path(loaded.path).parent / declared).resolve()
    return records_dir.resolve()


def request_for(
    loaded: LoadedSpec,
    records_dir: Path,
    rows: Sequence[dict[str, Any]] = (),
    batch_bytes: int | None = None,
    batch_unknown: str = "",
) -> MachineRequest:
    """The machine check's request for this campaign."""
    spec = loaded.spec
    one, source = checkpoint_bytes(rows)
    saves, how = planned_saves(loaded)
    folder = checkpoint_folder(loaded, records_dir)
    if one is None:
        place = Place("checkpoints", folder, None, f"not known: {source}")
    else:
        place = Place("checkpoints", folder, one * saves, f"{saves} × {one / MIB:.4g} MiB ({source}; {how})")
    ranks = max(1, spec.batch.replicas, spec.distributed.nproc_per_node)
    return MachineRequest(
        workers=spec.batch.num_workers,
        ranks=ranks,
        batch_bytes=batch_bytes,
        batch_unknown=batch_unknown,
        places=default_places(place),
        precision=spec.batch.precision,
    )
