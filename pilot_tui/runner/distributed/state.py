"""What a phase needs when it runs as one rank of several under torchrun (R22).

Everything here is a no-op in a single process (no process group), so the phase bodies call it
unconditionally and the single-process path stays bit for bit what it was.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

STRATEGIES = ("ddp", "fsdp")
# When this rank's training code last moved on (an update, a collective); a thread of the rank
# publishes it as the rank's heartbeat, so "no progress for N s" means what it says.
last_tick = time.time()


def tick() -> None:
    global last_tick
    last_tick = time.time()


def active() -> bool:
    """True inside a rank of an initialised process group."""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if active() else 0


def world() -> int:
    return dist.get_world_size() if active() else 1


def is_rank0() -> bool:
    return rank() == 0


def wrap(model: torch.nn.Module, strategy: str, device: torch.device) -> torch.nn.Module:
    """DDP, or FSDP2 with each block of every ModuleList sharded and then the root (torchtitan's shape)."""
    if not active() or strategy not in STRATEGIES:
        return model
    if strategy == "ddp":
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    # torch.distributed.fsdp takes seconds to import: only an FSDP campaign pays for it.
    from torch.distributed.fsdp import fully_shard

    for module in list(model.modules()):
        if isinstance(module, torch.nn.ModuleList):
            for block in module:
                fully_shard(block)
    fully_shard(model)
    return model


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The user's module under a DDP wrapper (FSDP2 shards in place and keeps the class)."""
    return getattr(model, "module", model) if type(model).__name__ == "DistributedDataParallel" else model


def strategy_of(model: torch.nn.Module) -> str:
    if type(model).__name__ == "DistributedDataParallel":
        return "ddp"
    if type(model).__name__.startswith("FSDP"):
        return "fsdp"
    return "none"


def _device_for(value: torch.Tensor | None = None) -> torch.device:
    # nccl reduces device tensors only; gloo host tensors.
    if active() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return value.device if value is not None else torch.device("cpu")


def sum_int(value: int) -> int:
    """The sum of an integer over every rank (the update's supervised targets, R9)."""
    if not active():
        return value
    tick()
    t = torch.tensor([value], dtype=torch.int64, device=_device_for())
    dist.all_reduce(t)
    tick()
    return int(t.item())


def sum_tensor(value: torch.Tensor) -> torch.Tensor:
    """A copy summed over every rank (the update's loss numerator)."""
    if not active():
        return value
    t = value.detach().clone().to(_device_for(value))
    dist.all_reduce(t)
    return t.to(value.device)


def full_norm(norm: torch.Tensor) -> torch.Tensor:
    """clip_grad_norm_ over FSDP2 parameters returns a DTensor: its full value."""
    full = getattr(norm, "full_tensor", None)
    return full() if full is not None else norm


@contextlib.contextmanager
def gradient_sync(model: torch.nn.Module, last: bool) -> Iterator[None]:
    """Reduce gradients only on the last microbatch of an update, as a real run does."""
    if last or not active():
        yield
        return
    strategy = strategy_of(model)
    if strategy == "ddp":
        with model.no_sync():  # type: ignore[operator]
            yield
    elif strategy == "fsdp":
        model.set_requires_gradient_sync(False)  # type: ignore[operator]
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)  # type: ignore[operator]
    else:
        yield


# torch.distributed.checkpoint (~0.2 s to import) loads only once a process group is active.
def _options(**kw: Any):
    from torch.distributed.checkpoint.state_dict import StateDictOptions  # see _options

    return StateDictOptions(full_state_dict=True, **kw)


def model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Full, unsharded weights under the user's own names on every rank (no `module.` prefix)."""
    if not active():
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import get_model_state_dict  # see _options

    return get_model_state_dict(model, options=_options())


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's full state keyed by parameter name (the gathered full state dict)."""
    if not active():
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict  # see _options

    return get_optimizer_state_dict(model, optimizer, options=_options())


def load_states(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, weights: dict[str, Any], optim: dict[str, Any]
) -> None:
    """Every rank reads the same full state and keeps its own shard of it."""
    if not active():
        model.load_state_dict(weights)
        optimizer.load_state_dict(optim)
        return
    from torch.distributed.checkpoint.state_dict import set_state_dict  # see _options

    set_state_dict(model, optimizer, model_state_dict=weights, optim_state_dict=optim, options=_options())


def from_rank0(value: Any) -> Any:
    """Rank 0's value on every rank (a file name chosen once, for example)."""
    if not active():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    if active():
        dist.barrier()
