"""Resume where it most often breaks (R15, R26): at an epoch boundary, with DataLoader workers
(seeded from the global RNG when an iterator starts), and in the first accumulation window after
the resume. A mismatch is named by the edge it happened at.

The edges run in the runner's process from a copy of the same checkpoint payload the resume
check writes (the fresh-process check covers the process boundary): an uninterrupted run fed by a
DataLoader as a training loop feeds itself — one iterator per epoch — against a run restored at
the edge whose iterator starts there, as a resumed process's does.
"""

from __future__ import annotations

import copy
import hashlib
from functools import partial
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from ...tasks.contract import Batch, Task
from .checkpoint import restore_training_state, training_state
from .training import TrainConfig, TrainState, train_update

EPOCH_BOUNDARY = "the epoch boundary"
WORKERS = "the loader workers"
FIRST_WINDOW = "the first accumulation window after resume"


def batch_digest(batch: Batch) -> str:
    """What the model is fed, hashed: every tensor's bytes, keys in order."""
    h = hashlib.sha256()
    for key in sorted(batch):
        t = batch[key].detach().contiguous().cpu()
        h.update(key.encode() + str(t.dtype).encode() + str(list(t.shape)).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def classify(
    first: int,
    resumed_at: int,
    updates_per_epoch: int,
    num_workers: int,
    data_differs: bool,
    later_match: bool,
) -> str:
    """The edge a resume mismatch belongs to. `first`: the first differing update (1-based over
    the whole run); `resumed_at`: updates before the save; `data_differs`: the batch fed differed
    there (not only the loss); `later_match`: the updates after the first differing one agree."""
    at_boundary = updates_per_epoch > 0 and resumed_at % updates_per_epoch == 0
    if data_differs and num_workers > 0:
        return WORKERS
    if first == resumed_at + 1 and at_boundary:
        return EPOCH_BOUNDARY
    if first == resumed_at + 1 and later_match:
        return FIRST_WINDOW
    return f"update {first}"


class _Examples(Dataset):
    def __init__(self, task: Task) -> None:
        self.task = task

    def __len__(self) -> int:
        return len(self.task.examples)

    def __getitem__(self, i: int):
        return self.task.examples[i]


def _collate(task: Task, max_length: int, examples):
    return task.collate(examples, max_length)


def _run(
    state: TrainState,
    task: Task,
    device: torch.device,
    grad_clip: float,
    updates: int,
    workers: int,
    save_at: int = -1,
):
    """`updates` updates fed by a DataLoader, a new iterator at each epoch (and where the run
    starts): what each update saw and its loss, and the payload saved after update `save_at`."""
    seen: list[dict[str, Any]] = []
    saved = None
    left = updates
    while left:
        # The rest of the current epoch (or of the run), in the sampler's order, read from a copy:
        # the state's own sampler advances update by update, as the checkpoint must record it.
        ahead = copy.deepcopy(state.sampler)
        plan: list[list[list[int]]] = []
        while left and (not plan or ahead.position < ahead.updates_per_epoch):
            plan.append(ahead.next_update())
            left -= 1
        loader = DataLoader(
            _Examples(task),
            batch_sampler=[m for u in plan for m in u],
            collate_fn=partial(_collate, task, state.config.max_length),
            num_workers=workers,
        )
        batches = iter(loader)
        for planned in plan:
            micro = state.sampler.next_update()
            assert micro == planned
            host = [next(batches) for _ in micro]
            digests = [batch_digest(b) for b in host]
            stats = train_update(state, task, device, grad_clip, micro, host)
            seen.append(
                {
                    "update": state.step,
                    "epoch": state.sampler.epoch,
                    "digests": digests,
                    "loss": float(stats.loss),
                }
            )
            if state.step == save_at:
                saved = copy.deepcopy(training_state(state))
        del batches, loader
    return seen, saved


def skip_next_epoch(saved: dict[str, Any]) -> None:
    """Test hook (`break_resume = "epoch"`): the position saved at an epoch's end counted as the
    next epoch's end, as a loop that adds the finished epoch twice does (the next epoch is skipped)."""
    data = saved["data"]
    saved["data"] = dict(data) | {"epoch": int(data["epoch"]) + 1}


def check_edge(
    new_state,
    task: Task,
    config: TrainConfig,
    device: torch.device,
    grad_clip: float,
    k: int,
    n: int,
    workers: int,
    spoil=None,
) -> dict[str, Any]:
    """Save after k updates, go on for n; restore the save in a fresh state and take the same n.
    `new_state(config)` builds a state from the campaign's seed (RunContext.new_state); `spoil`
    changes the saved payload (a test hook)."""
    reference, saved = _run(new_state(config), task, device, grad_clip, k + n, workers, save_at=k)
    resumed_state = new_state(config)
    assert saved is not None
    if spoil is not None:
        spoil(saved)
    restore_training_state(resumed_state, saved)
    resumed, _ = _run(resumed_state, task, device, grad_clip, n, workers)
    after = reference[k:]
    per_epoch = resumed_state.sampler.updates_per_epoch
    out: dict[str, Any] = {
        "k": k,
        "n": n,
        "num_workers": workers,
        "updates_per_epoch": per_epoch,
        "at_epoch_boundary": per_epoch > 0 and k % per_epoch == 0,
        "ok": True,
    }
    for j, (a, b) in enumerate(zip(after, resumed, strict=True)):
        data = a["digests"] != b["digests"]
        if data or a["loss"] != b["loss"]:
            later = all(
                x["digests"] == y["digests"] and x["loss"] == y["loss"]
                for x, y in zip(after[j + 1 :], resumed[j + 1 :], strict=True)
            )
            out |= {
                "ok": False,
                "update": a["update"],
                "data_differs": data,
                "loss_uninterrupted": a["loss"],
                "loss_resumed": b["loss"],
                "edge": classify(a["update"], k, per_epoch, workers, data, later),
            }
            break
    return out


def edge_cases(
    ctx_new_state,
    task: Task,
    config: TrainConfig,
    device: torch.device,
    grad_clip: float,
    k: int,
    n: int,
    num_workers: int,
    updates_per_epoch: int,
    max_updates: int,
    spoil_epoch=None,
) -> list[dict[str, Any]]:
    """The edges worth their cost for this campaign: the epoch boundary when an epoch is at most
    `max_updates` long, and the resume check's k under the campaign's loader workers when it has
    some. Each a result of `check_edge`."""
    out = []
    n_edge = max(1, min(n, 2))
    if 0 < updates_per_epoch <= max_updates:
        found = check_edge(
            ctx_new_state,
            task,
            config,
            device,
            grad_clip,
            updates_per_epoch,
            n_edge,
            num_workers,
            spoil_epoch,
        )
        out.append(found | {"case": "epoch_boundary"})
    if num_workers > 0 and (updates_per_epoch == 0 or k % updates_per_epoch):
        out.append(
            check_edge(ctx_new_state, task, config, device, grad_clip, k, n_edge, num_workers)
            | {"case": "workers"}
        )
    return out


def reason(found: dict[str, Any]) -> str:
    what = "the batch fed" if found["data_differs"] else "the loss"
    why = {
        WORKERS: " — workers are seeded from the global RNG when the iterator starts, so a collate or "
        "dataset that draws random numbers in them draws others after a mid-epoch resume (seed them from "
        "the epoch and position, or draw in the main process)",
        EPOCH_BOUNDARY: " — the data position saved at the end of an epoch does not resume at the next one",
        FIRST_WINDOW: " — only the first update after resume differs: state restored after its window was fetched",
    }.get(found["edge"], "")
    return (
        f"resume breaks at {found['edge']}: {what} at update {found['update']} differs after a resume at "
        f"update {found['k']} ({found['loss_uninterrupted']:.6g} uninterrupted vs {found['loss_resumed']:.6g} "
        f"resumed){why}"
    )
