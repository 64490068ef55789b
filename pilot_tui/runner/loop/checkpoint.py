"""Training checkpoints and inference exports, written atomically and loaded safely (R15-R17).

Everything saved is plain tensors and numbers, so `torch.load(..., weights_only=True)` reads it;
there is no fallback to unpickling, ever.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ...core.atomic import write_atomic
from ..distributed import state as dist_state
from ..safe_load import load_checkpoint, load_tensors
from .training import TrainState


def rng_state() -> dict[str, Any]:
    py = random.getstate()
    state: dict[str, Any] = {
        # Python's Mersenne state as a tensor: weights_only can hold tensors, ints and lists.
        "python_version": py[0],
        "python_state": torch.tensor(py[1], dtype=torch.int64),
        "python_gauss": py[2] if py[2] is not None else float("nan"),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    gauss = state["python_gauss"]
    random.setstate(
        (
            int(state["python_version"]),
            tuple(int(x) for x in state["python_state"].tolist()),
            None if gauss != gauss else gauss,
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def rest_state(state: TrainState) -> dict[str, Any]:
    """What a resume needs besides the model and optimizer tensors."""
    return {
        "scheduler": state.scheduler.state_dict(),
        "scaler": state.scaler.state_dict(),
        "rng": rng_state(),
        "data": state.sampler.state_dict(),
        "step": state.step,
    }


def training_state(state: TrainState) -> dict[str, Any]:
    """Everything a resume needs. Under DDP/FSDP: the gathered full state dict (every rank holds
    the whole model and optimizer under the user's parameter names; rank 0 alone writes it)."""
    return {
        "model": dist_state.model_state(state.model),
        "optimizer": dist_state.optimizer_state(state.model, state.optimizer),
    } | rest_state(state)


def save_training_state(state: TrainState, path: Path, kind: str = "full") -> dict[str, Any]:
    """Write the checkpoint of `kind` (a `.pt` file, or a sharded directory); this rank's
    figures: `save_s` (the write, not the read-back) and `written_mb` (this rank's bytes)."""
    if kind == "sharded":
        # torch.distributed.checkpoint takes ~0.2 s to import: only a sharded checkpoint loads it.
        from ..distributed.sharded import save_sharded

        return save_sharded(state, path, rest_state(state))
    t0 = time.perf_counter()
    payload = training_state(state)  # a collective under DDP/FSDP: every rank takes part
    if dist_state.is_rank0():
        write_atomic(path, lambda tmp: torch.save(payload, tmp))
    seconds = time.perf_counter() - t0
    dist_state.barrier()  # the file exists for every rank after this
    written = path.stat().st_size if dist_state.is_rank0() else 0
    return {"save_s": round(seconds, 6), "written_mb": round(written / 2**20, 4), "rank": dist_state.rank()}


def write_checkpoint(payload: dict[str, Any], path: Path) -> None:
    """Write an already assembled `training_state` dict atomically (the resume check edits a copy
    of it to break a resume on purpose)."""
    write_atomic(path, lambda tmp: torch.save(payload, tmp))


def load_training_state(
    path: Path, provenance: Mapping[str, Any], map_location: str | torch.device = "cpu"
) -> dict[str, Any]:
    """Safe load only: the file must match its recorded sha256 (`provenance`, the record's
    artifact entry) and hold nothing but tensors and plain data (see `safe_load`)."""
    return load_checkpoint(path, provenance, map_location=map_location)


def restore_training_state(state: TrainState, saved: dict[str, Any]) -> None:
    dist_state.load_states(state.model, state.optimizer, saved["model"], saved["optimizer"])
    restore_rest(state, saved)


def restore_rest(state: TrainState, saved: Mapping[str, Any]) -> None:
    state.scheduler.load_state_dict(saved["scheduler"])
    state.scaler.load_state_dict(saved["scaler"])
    state.sampler.load_state_dict(saved["data"])
    state.step = int(saved["step"])
    set_rng_state(saved["rng"])


def detached_copies(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Tensors safetensors can write: each its own contiguous CPU copy. Tied weights (an LM head
    sharing the embedding) share memory, which `save_file` refuses."""
    return {k: v.detach().contiguous().cpu().clone() for k, v in tensors.items()}


def export_weights(
    model: torch.nn.Module, path: Path, state: Mapping[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """The model's state dict (or the task's `export_state`, e.g. a LoRA adapter) as safetensors:
    one full copy, written by rank 0 alone when the model is sharded or replicated (R22)."""
    tensors = detached_copies(dist_state.model_state(model) if state is None else state)
    if dist_state.is_rank0():
        write_atomic(path, lambda tmp: save_file(tensors, tmp))
    dist_state.barrier()
    return tensors


def load_weights(path: Path, provenance: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Exported safetensors weights, after checking them against their recorded sha256."""
    return load_tensors(path, provenance)


def resume_from(state: TrainState, path: Path, provenance: Mapping[str, Any]) -> dict[str, Any]:
    """Load a checkpoint of either kind into a freshly built `state`; the non-tensor part (with
    `note` set when a sharded one was saved at another world size). Refused before anything is
    read when the record does not vouch for it (R17)."""
    if path.is_dir():
        # torch.distributed.checkpoint takes ~0.2 s to import: only a sharded checkpoint loads it.
        from ..distributed.sharded import load_sharded

        saved = load_sharded(state, path, provenance)
        restore_rest(state, saved)
        return saved
    saved = load_training_state(path, provenance)
    restore_training_state(state, saved)
    return {k: v for k, v in saved.items() if k not in ("model", "optimizer")} | {"note": ""}
