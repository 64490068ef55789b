"""One training configuration's state and its optimizer update, with honest normalisation."""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch

from ...core import dimensions
from ...tasks.contract import Batch, Example, Task
from ..checks import objective
from ..distributed import state as dist_state
from . import optimizers
from .data import UpdateSampler


@dataclass(frozen=True)
class TrainConfig:
    """The inputs of a phase run: what the row's `params` shows (R6)."""

    variant: str
    microbatch: int
    accumulation: int
    replicas: int
    max_length: int
    precision: str
    activation_checkpointing: bool
    lr: float
    seed: int
    total_updates: int
    notes: tuple[str, ...] = ()
    # none | ddp | fsdp: how the model is wrapped when the phase runs on several ranks (R22).
    strategy: str = "none"
    # runner/loop/optimizers.py's name: adamw | adamw_fused | sgd | adafactor.
    optimizer: str = "adamw"
    # Dimensions of core/dimensions.py without a field here (name, value): they reach the row's
    # params and the estimate all the same; the code that uses one reads it with `value()`.
    extra: tuple[tuple[str, Any], ...] = ()

    @property
    def effective_batch(self) -> int:
        return self.microbatch * self.accumulation * self.replicas

    def value(self, name: str) -> Any:
        """A dimension's value, a field's or an extra one's."""
        extras = dict(self.extra)
        return extras[name] if name in extras else getattr(self, name)

    def params(self) -> dict[str, Any]:
        out = asdict(self)
        del out["extra"]
        out |= dict(self.extra)
        out["effective_batch"] = self.effective_batch
        out["notes"] = list(self.notes)
        return out

    @classmethod
    def from_params(cls, raw: dict[str, Any]) -> TrainConfig:
        """Back from `params()` (a fresh process gets its configuration as JSON)."""
        names = {f.name for f in fields(cls)} - {"extra"}
        extra = tuple(
            (d.name, raw[d.name]) for d in dimensions.DIMENSIONS if d.name not in names and d.name in raw
        )
        kept = {k: v for k, v in raw.items() if k in names}  # params() adds derived figures
        return cls(**(kept | {"notes": tuple(raw.get("notes", ())), "extra": extra}))


# One reusable no-op context: fp32 and a single process enter it every microbatch.
_NO_CONTEXT = contextlib.nullcontext()


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[Any]:
    if precision == "fp32":
        return _NO_CONTEXT
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def to_device(batch: Batch, device: torch.device) -> Batch:
    """Copy a host batch to the device without making the host wait for it.

    A non-blocking copy from pageable memory is staged by the driver and the host waits for it;
    from pinned (page-locked) memory it really is asynchronous. PyTorch's caching host
    allocator reuses the pinned blocks and keeps each alive until its copy has run.
    """
    if device.type != "cuda":
        return {k: v.to(device) for k, v in batch.items()}
    return {k: _pinned(v).to(device, non_blocking=True) for k, v in batch.items()}


def _pinned(t: torch.Tensor) -> torch.Tensor:
    return t if t.device.type != "cpu" or t.is_pinned() else t.pin_memory()


def lr_lambda(warmup: int, schedule: str, total: int):
    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant" or total <= warmup:
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        if schedule == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


@dataclass
class UpdateStats:
    """One optimizer update. Loss and grad norm are 0-d tensors: on a GPU reading them syncs the
    device, so the loop reads them only where it must."""

    loss: torch.Tensor
    grad_norm: torch.Tensor
    supervised: int
    examples: int
    tokens: int
    shapes: list[list[int]] = field(default_factory=list)
    # fp16: the gradient scaler skipped the optimizer step (inf/NaN gradients): not an update.
    skipped: bool = False
    # Host seconds in the model's own work: zeroing, forward and loss, backward, clipping, the
    # optimizer's step. The rest of an update is the loop around it (steady's `loop_own_s`); on
    # CUDA these are launch times, not the device's.
    model_s: float = 0.0


@dataclass
class TrainState:
    """Model, optimizer, schedule, scaler and data position of one configuration."""

    config: TrainConfig
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler
    sampler: UpdateSampler
    step: int = 0


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def build_state(
    task: Task,
    config: TrainConfig,
    train_indices: Sequence[int],
    device: torch.device,
    *,
    weight_decay: float,
    warmup: int,
    schedule: str,
    drop_last: bool,
    data_seed: int,
) -> TrainState:
    """Same seed, same initial weights: every variant and LR starts from the same model."""
    seed_everything(config.seed)
    model = task.build_model().to(device)
    if config.activation_checkpointing:
        if task.set_activation_checkpointing is None:
            raise ValueError("this task exposes no activation-checkpointing switch")
        task.set_activation_checkpointing(model, True)
    # Under torchrun: DDP or FSDP2 around the same initial weights (every rank seeds alike).
    model = dist_state.wrap(model, config.strategy, device)
    optimizer = optimizers.build(
        config.optimizer, list(model.parameters()), lr=config.lr, weight_decay=weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_lambda(warmup, schedule, config.total_updates)
    )
    scaler = torch.amp.GradScaler(device.type, enabled=config.precision == "fp16")
    sampler = UpdateSampler(
        list(train_indices),
        config.microbatch,
        config.accumulation,
        seed=data_seed,
        drop_last=drop_last,
        replicas=dist_state.world(),
        rank=dist_state.rank(),
    )
    return TrainState(config, model, optimizer, scheduler, scaler, sampler)


def collate(task: Task, examples: Sequence[Example], max_length: int, device: torch.device) -> Batch:
    return to_device(task.collate(examples, max_length), device)


def _tokens(batch: Batch) -> int:
    """The attended positions of a batch (its examples, without a mask)."""
    if "attention_mask" not in batch:
        return len(batch["labels"])
    return int(batch["attention_mask"].count_nonzero())


def train_update(
    state: TrainState,
    task: Task,
    device: torch.device,
    grad_clip: float,
    micro: list[list[int]] | None = None,
    host: list[Batch] | None = None,
) -> UpdateStats:
    """One optimizer update over `accumulation` microbatches.

    The loss is the sum over every microbatch divided by the supervised targets of the *whole*
    update, not a mean of per-microbatch means (R9); on several ranks the count is all-reduced, so
    it is the whole global update's. With fp16 the scaler steps and updates once per optimizer
    step, never per microbatch. `host` takes batches already collated (by a DataLoader).
    """
    cfg = state.config
    micro = micro if micro is not None else state.sampler.next_update()
    if host is None:
        host = [task.collate([task.examples[i] for i in idx], cfg.max_length) for idx in micro]
    # Counted on the host batches, before the copy: counting device tensors would sync the device
    # twice per microbatch, every update.
    local = sum(objective.supervised_count(task, b) for b in host)
    total = dist_state.sum_int(local)
    tokens = sum(_tokens(b) for b in host)
    batches = [to_device(b, device) for b in host]
    del host
    denom = max(total, 1)  # an update with no supervised target contributes no gradient
    # DDP and FSDP average gradients over ranks; the loss wants their sum over the global update.
    ranks = dist_state.world()
    scaler = state.scaler if state.scaler.is_enabled() else None
    if not state.model.training:  # train() walks every module: only after an evaluation set eval
        state.model.train()
    # A stamp is one perf_counter (~50 ns): the model's work is timed apart from the loop's.
    tick = time.perf_counter
    started = tick()
    state.optimizer.zero_grad(set_to_none=True)
    model_s = tick() - started
    # On a CPU the loss is read where it is made, a Python float per microbatch: there is no
    # device to wait for, and no tensor numerator is kept alive through every backward. On a GPU
    # reading it would sync the device every microbatch: there the numerator stays on the device.
    read_here = device.type == "cpu" and ranks == 1
    numerator = 0.0
    loss_total: torch.Tensor | None = None
    shapes = []
    last = len(batches) - 1
    for i, batch in enumerate(batches):
        shapes.append(list(next(iter(batch.values())).shape))
        # Outside torchrun there is nothing to hold back: no context built per microbatch.
        sync = dist_state.gradient_sync(state.model, last=i == last) if ranks > 1 else _NO_CONTEXT
        started = tick()
        with sync:
            with autocast(device, cfg.precision):
                part = objective.loss_sum(task, objective.forward(task, state.model, batch), batch)
            if read_here:  # item() reads any dtype as a Python float: no detached tensor made
                numerator += part.item()
            else:  # the first part starts the sum (0 + a is a, bit for bit): no zeros tensor
                kept = part.detach().float()
                loss_total = kept if loss_total is None else loss_total + kept
                del kept
            # No name is left on the graph: the logits and the graph's tensors are freed as the
            # backward consumes them, as in a plain loop, not held into the next forward.
            scaled = part * ranks / denom if ranks > 1 else part / denom
            del part
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
            del scaled
        model_s += tick() - started
    if read_here:
        loss = torch.tensor(numerator / denom, dtype=torch.float32)
    else:
        summed = dist_state.sum_tensor(
            loss_total if loss_total is not None else torch.zeros((), device=device)
        )
        loss = summed / denom
    started = tick()
    if scaler is not None:
        scaler.unscale_(state.optimizer)
    # clip_grad_norm_ skips parameters without a gradient itself: no list of them built per update.
    grad_norm = torch.nn.utils.clip_grad_norm_(
        state.model.parameters(), grad_clip if grad_clip > 0 else float("inf")
    )
    grad_norm = dist_state.full_norm(grad_norm)
    skipped = False
    if scaler is not None:
        # fp16: a step skipped for inf/NaN gradients lowers the scale and must not advance the
        # schedule. Reading the scale syncs the device, so only the fp16 path pays for it.
        scale_before = scaler.get_scale()
        scaler.step(state.optimizer)
        scaler.update()
        skipped = scaler.get_scale() < scale_before
    else:
        state.optimizer.step()
    model_s += tick() - started
    if not skipped:
        state.scheduler.step()
    state.step += 1
    dist_state.tick()
    return UpdateStats(
        loss=loss,
        # clip_grad_norm_ runs under no_grad: its norm has no graph, unless a wrapper gave it one.
        grad_norm=grad_norm.detach() if grad_norm.requires_grad else grad_norm,
        supervised=total,
        examples=sum(len(m) for m in micro),
        tokens=tokens,
        shapes=shapes,
        skipped=skipped,
        model_s=model_s,
    )


@torch.no_grad()
def evaluate(state: TrainState, task: Task, batch: Batch) -> tuple[torch.Tensor, int]:
    """Mean loss per supervised target on one batch, in eval mode and the state's precision."""
    state.model.eval()
    with autocast(batch[next(iter(batch))].device, state.config.precision):
        logits = objective.forward(task, state.model, batch)
        total = objective.loss_sum(task, logits, batch)
    count = objective.supervised_count(task, batch)
    return total / max(count, 1), count
