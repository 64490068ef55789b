"""Which training state lives on the device, and how many bytes its tensors hold (R11).

A memory variant is measured alone: the control's (or another run's) weights, gradients and
optimizer state parked on the device would both inflate the variant's peak and, on a large model,
make it run out of memory for a reason that has nothing to do with the variant. Other states are
parked in host memory while a variant runs and come back when a phase asks for them.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .training import TrainState

MIB = 1024 * 1024


def tensors_bytes(tensors: Iterable[torch.Tensor], device: torch.device | None = None) -> int:
    """Bytes of distinct storages among `tensors` (optionally only those on `device`)."""
    seen: dict[tuple[str, int], int] = {}
    for t in tensors:
        # An FSDP2 parameter (DTensor): this rank's shard is what sits in its memory.
        to_local = getattr(t, "to_local", None)
        t = to_local() if to_local is not None else t
        if device is not None and t.device.type != device.type:
            continue
        storage = t.untyped_storage()
        seen[(str(t.device), storage.data_ptr())] = storage.nbytes()
    return sum(seen.values())


def weight_tensors(state: TrainState) -> list[torch.Tensor]:
    return list(state.model.parameters()) + list(state.model.buffers())


def gradient_tensors(state: TrainState) -> list[torch.Tensor]:
    return [p.grad for p in state.model.parameters() if p.grad is not None]


def optimizer_tensors(state: TrainState) -> list[torch.Tensor]:
    return [v for s in state.optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]


def state_bytes(state: TrainState, device: torch.device | None = None) -> dict[str, int]:
    """Weights, gradients and optimizer state of one configuration, computed from its tensors."""
    return {
        "weights": tensors_bytes(weight_tensors(state), device),
        "gradients": tensors_bytes(gradient_tensors(state), device),
        "optimizer_state": tensors_bytes(optimizer_tensors(state), device),
    }


def park(state: TrainState) -> None:
    """Move a state's model (with its gradients) and optimizer tensors to host memory."""
    host = torch.device("cpu")
    state.model.to(host)  # Module.to moves parameters in place, and their .grad with them
    moved: list[tuple[dict, str, torch.device]] = []
    for slot in state.optimizer.state.values():
        for key, value in slot.items():
            # AdamW keeps `step` on the host already; only device tensors move (and come back).
            if isinstance(value, torch.Tensor) and value.device.type != "cpu":
                moved.append((slot, key, value.device))
                slot[key] = value.to(host)
    # Kept beside the state, not inside the optimizer's dict, so a state_dict never carries it.
    state.__dict__["_parked"] = moved


def unpark(state: TrainState, device: torch.device) -> None:
    """Bring a parked state back to `device`, exactly where its tensors were before."""
    state.model.to(device)
    for slot, key, where in state.__dict__.pop("_parked", []):
        slot[key] = slot[key].to(where)


def park_others(
    states: dict[str, TrainState], keep: str | None, parked: set[str], device: torch.device
) -> list[str]:
    """Park every state but `keep` (all of them when `keep` is None); returns the parked names.

    On CPU the state already is in host memory: nothing moves, but the names are kept all the
    same, so a row says which states were off the measurement on every device.
    """
    for name, state in states.items():
        if name != keep and name not in parked:
            if device.type == "cuda":
                park(state)
            parked.add(name)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return sorted(parked & set(states))
