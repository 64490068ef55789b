"""The largest batch the loader hands over, in bytes: what each in-flight batch holds in
`/dev/shm` when loader workers pass it to the trainer."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...tasks.contract import Task

CHUNK = 64
# Past this many examples the scan stops: the figure is then of the ones scanned, and says so.
SCAN_LIMIT = 20_000


def largest_batch_bytes(
    task: Task, examples: Sequence[int], microbatch: int, max_length: int
) -> tuple[int, str]:
    """microbatch × the bytes of the heaviest example, padded to its own length as collated.

    Each chunk is collated as the task collates a batch; a chunk is padded to its longest row,
    so its bytes per row are at least those of its heaviest example padded alone — what a
    microbatch of the longest examples holds per row.
    """
    scanned = list(examples[:SCAN_LIMIT])
    heaviest = 0.0
    for start in range(0, len(scanned), CHUNK):
        rows = [task.examples[i] for i in scanned[start : start + CHUNK]]
        batch = task.collate(rows, max_length)
        total = sum(t.numel() * t.element_size() for t in batch.values() if isinstance(t, torch.Tensor))
        heaviest = max(heaviest, total / len(rows))
    what = f"{microbatch} × {heaviest:.0f} B per example"
    if len(examples) > SCAN_LIMIT:
        what += f" (the heaviest of the first {SCAN_LIMIT} of {len(examples)} examples)"
    return int(microbatch * heaviest), what
