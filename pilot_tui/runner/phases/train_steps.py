"""`first_step` (allocates optimizer state, R5) and `steady` (N timed updates)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from ...core.verdict import WARN
from .. import finiteness
from ..context import RunContext
from ..probes import synchronize
from ..training import TrainState, UpdateStats, train_update
from .base import Outcome, PhaseFailure, PhaseRun, finite, phase
from .load import tensor_mb


def optimizer_state_mb(state: TrainState) -> float:
    tensors = [v for s in state.optimizer.state.values() for v in s.values() if hasattr(v, "numel")]
    return round(tensor_mb(tensors), 3)


def _update(
    ctx: RunContext,
    run: PhaseRun,
    state: TrainState,
    micro: list[list[int]] | None = None,
    host: list[Any] | None = None,
) -> UpdateStats:
    micro = micro if micro is not None else state.sampler.next_update()
    run.current_input = {
        "microbatch": state.config.microbatch,
        "max_length": state.config.max_length,
        "update": state.step + 1,
    }
    stats = train_update(state, ctx.task, ctx.device, ctx.spec.optim.grad_clip, micro, host)
    run.current_input["shapes"] = stats.shapes
    return stats


def gradless(model: torch.nn.Module) -> dict[str, Any]:
    """Trainable parameters that got no gradient in the update just taken, by module.

    `train_update` steps only the parameters that have a gradient, so an unused head or a
    detached encoder trains silently at zero. Modules are named at the highest level whose
    trainable parameters all lack one (`encoder`, not each of its 24 layers). Frozen parameters
    (`requires_grad = False`) are a choice, counted apart.
    """
    params = dict(model.named_parameters())
    trainable = {n: p for n, p in params.items() if p.requires_grad}
    dead = {n for n, p in trainable.items() if p.grad is None}
    total = sum(p.numel() for p in trainable.values())
    dead_numel = sum(trainable[n].numel() for n in dead)
    modules: list[dict[str, Any]] = []
    covered: set[str] = set()
    for name, module in model.named_modules():
        own = [f"{name}.{n}" if name else n for n, p in module.named_parameters() if p.requires_grad]
        if not own or any(n not in dead for n in own) or any(n in covered for n in own):
            continue
        covered.update(own)
        numel = sum(trainable[n].numel() for n in own)
        modules.append({"module": name or "(the whole model)", "parameters": numel})
    return {
        "gradless_parameters": dead_numel,
        "trainable_parameters": total,
        "gradless_share_pct": round(100.0 * dead_numel / total, 2) if total else 0.0,
        "gradless_modules": modules[:20],
        "frozen_parameters": sum(p.numel() for p in params.values() if not p.requires_grad),
    }


def _gradless_reason(found: dict[str, Any]) -> str:
    modules = found["gradless_modules"]
    named = ", ".join(f"{m['module']} ({m['parameters']:,})" for m in modules[:5])
    more = f" and {len(modules) - 5} more" if len(modules) > 5 else ""
    return (
        f"{found['gradless_share_pct']:g}% of trainable parameters ({found['gradless_parameters']:,} of "
        f"{found['trainable_parameters']:,}) got no gradient in the first update: {named}{more} — an unused "
        "head or a detached module never trains (freeze it with requires_grad = False if that is meant)"
    )


def machine_load() -> float | None:
    """The 1-minute load average (None where the OS has none): how busy the machine was."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def load_details(before: float | None, after: float | None) -> dict[str, float | int]:
    """What the timed loop shared the machine with: step times hold only at this thread count,
    on a machine this busy (a plan made under load is flagged by `plan.busy_machine`)."""
    out: dict[str, float | int] = {"torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count() or 0}
    loads = [x for x in (before, after) if x is not None]
    if loads:
        out["load_avg_1m"] = round(max(loads), 2)
    return out


# Overflowing updates the fp16 scaler may skip before the first real step (it halves each time).
MAX_SCALER_SKIPS = 32


@phase("first_step")
def first_step(ctx: RunContext, run: PhaseRun) -> Outcome:
    variant = run.step.variant
    state = ctx.state(variant, ctx.config(variant, run.overrides))
    if state.step != 0:  # the first step must be a real first step: fresh optimizer state
        ctx.states.pop(variant)
        state = ctx.state(variant, ctx.config(variant, run.overrides))
    stats = _update(ctx, run, state)
    # fp16: an overflow at the initial scale makes GradScaler skip the optimizer step and back off.
    # That is its design, not a fault, but then no optimizer state exists yet: repeat until a real
    # step is taken, so this phase measures what a first step allocates (R5, R11).
    skipped = 0
    while (
        state.scaler.is_enabled()
        and not finite(float(stats.grad_norm))
        and finite(float(stats.loss))
        and skipped < MAX_SCALER_SKIPS
    ):
        skipped += 1
        stats = _update(ctx, run, state)
    loss, gn = float(stats.loss), float(stats.grad_norm)
    details = {
        "loss": loss,
        "grad_norm": gn,
        "supervised_targets": stats.supervised,
        "examples": stats.examples,
        "input_shapes": stats.shapes,
        "optimizer_state_mb": optimizer_state_mb(state),
        "lr": state.scheduler.get_last_lr()[0],
    }
    if state.scaler.is_enabled():
        details["grad_scale"] = state.scaler.get_scale()
        details["scaler_skipped_updates"] = skipped
    if not finite(loss) or not finite(gn):
        finiteness.note(ctx.memo, variant, state.step, "first_step")
        raise PhaseFailure(
            f"non-finite {'loss' if not finite(loss) else 'gradient norm'} at the first update "
            f"(update {state.step} of the campaign)",
            details,
        )
    if stats.supervised == 0:
        raise PhaseFailure(
            "the first update has no supervised target: the loss reads 0 while it means nothing", details
        )
    found = gradless(state.model)
    details |= found
    if found["gradless_parameters"]:
        return Outcome(WARN, _gradless_reason(found), details)
    return Outcome(details=details)


class _Examples(Dataset):
    """The task's examples by index, for a DataLoader whose batch sampler is the update sampler."""

    def __init__(self, task) -> None:
        self.task = task

    def __len__(self) -> int:
        return len(self.task.examples)

    def __getitem__(self, i: int):
        return self.task.examples[i]


def _collate(task, max_length: int, delay_s: float, examples):
    if delay_s:
        time.sleep(delay_s)  # test hook: a collate made slow on purpose (override collate_delay_s)
    return task.collate(examples, max_length)


def loader_updates(
    ctx: RunContext, state: TrainState, n: int, delay_s: float = 0.0
) -> Iterator[tuple[list[list[int]], list[Any], float]]:
    """n updates fed by a real torch DataLoader with the campaign's `num_workers` and `pin_memory`:
    (microbatch indices, host batches, seconds spent waiting in `next(iterator)`).

    The update sampler still decides the order (its position advances exactly as n updates do),
    so a resume after a steady phase sees the same data either way.
    """
    b = ctx.spec.batch
    updates = [state.sampler.next_update() for _ in range(n)]
    loader = DataLoader(
        _Examples(ctx.task),
        batch_sampler=[m for u in updates for m in u],
        collate_fn=partial(_collate, ctx.task, state.config.max_length, delay_s),
        num_workers=b.num_workers,
        pin_memory=b.pin_memory and ctx.device.type == "cuda",
    )
    batches = iter(loader)
    for micro in updates:
        t = time.perf_counter()
        host = [next(batches) for _ in micro]
        yield micro, host, time.perf_counter() - t


# Data wait per update below which a CPU steady row does not warn (see steady()).
CPU_WAIT_FLOOR_S = 0.005


@phase("steady")
def steady(ctx: RunContext, run: PhaseRun) -> Outcome:
    variant = run.step.variant
    state = ctx.state(variant, ctx.config(variant, run.overrides))
    notes = []
    if state.step == 0:
        # The first update allocates optimizer state and is slower: keep it out of the timing.
        _update(ctx, run, state)
        notes.append("ran one untimed first update before timing (first_step had not run)")
    # One untimed warm-up update: the first after a phase boundary pays for the allocator's
    # cache emptied there (and lazy kernel loading on CUDA); the timed ones are the steady ones.
    warmup = _update(ctx, run, state)
    n = int(run.overrides.get("steady_updates") or ctx.spec.phases.steady_updates)
    taken = state.step  # updates already taken: a failure is named by the campaign's update number
    losses, examples, tokens, times = [], 0, 0, []
    skips: list[bool] = []
    # CUDA runs asynchronously: a host clock around one update times its launch, not its kernels.
    # Events on the stream time each update on the device without a sync per step.
    events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
    cuda = ctx.device.type == "cuda"
    delay = float(run.overrides.get("collate_delay_s") or 0.0)
    feed = loader_updates(ctx, state, n, delay)
    waits: list[float] = []
    synchronize(ctx.device)
    load_before = machine_load()
    t0 = time.perf_counter()
    for i in range(n):
        ctx.check_cancel()
        micro, host, wait = next(feed)  # the data wait stays out of the per-update step time
        waits.append(wait)
        if cuda:
            events.append((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
            events[-1][0].record()
        t = time.perf_counter()
        stats = _update(ctx, run, state, micro, host)
        if cuda:
            events[-1][1].record()
        else:
            times.append(time.perf_counter() - t)
        losses.append(stats.loss)
        skips.append(stats.skipped)
        examples += stats.examples
        tokens += stats.tokens
        if (i + 1) % 10 == 0 or i + 1 == n:
            # Reading a loss syncs the device: only every 10 updates, never each step.
            ctx.progress(run.step.key, i + 1, n, float(stats.loss))
    synchronize(ctx.device)
    total = time.perf_counter() - t0
    if cuda:
        times = [start.elapsed_time(end) / 1000 for start, end in events]  # ms -> s
    values = torch.stack(losses).tolist()  # one copy to the host, not one per update
    times.sort()
    details = {
        "updates": n,
        "warmup_updates": 1,
        "step_time_s": total / n,
        "step_time_p50_s": times[len(times) // 2],
        "step_time_p90_s": times[min(len(times) - 1, int(0.9 * len(times)))],
        "step_time_p10_s": times[int(0.1 * len(times))],
        **load_details(load_before, machine_load()),
        "examples_per_s": examples / total,
        "tokens_per_s": tokens / total,
        "loss_first": values[0],
        "loss_last": values[-1],
        "losses": values,
        "notes": notes,
        # Waiting in next(DataLoader iterator) against the whole timed loop (R22).
        "data_wait_s": sum(waits) / n,
        "data_wait_share": sum(waits) / total if total > 0 else 0.0,
        "loader": {"num_workers": ctx.spec.batch.num_workers, "pin_memory": ctx.spec.batch.pin_memory},
    }
    if state.scaler.is_enabled():
        # fp16: a step the scaler skipped (inf/NaN gradients) was timed but moved no weight.
        details["scaler_skipped_updates"] = sum(bool(x) for x in skips)
        details["grad_scale"] = state.scaler.get_scale()
    bad = next((i for i, v in enumerate(values) if not finite(v)), None)
    if not finite(float(warmup.loss)) or bad is not None:
        # Named by the campaign's update number: the warm-up is update `taken`, timed ones follow.
        update, which = (
            (taken, "the untimed warm-up")
            if not finite(float(warmup.loss))
            else (taken + bad + 1, f"timed steady update {bad + 1} of {n}")  # type: ignore[operator]
        )
        finiteness.note(ctx.memo, variant, update, "steady")
        details["non_finite_update"] = update
        raise PhaseFailure(
            f"non-finite loss at update {update} of the campaign ({which}): the weights are NaN or inf "
            "from there on",
            details,
        )
    # The trend is judged over every update this phase took, the warm-up one included.
    start = float(warmup.loss)
    details["loss_warmup"] = start
    warnings = []
    if values[-1] >= start:
        warnings.append(f"loss did not fall over {n + 1} updates ({start:.4g} -> {values[-1]:.4g})")
    share, limit = details["data_wait_share"], ctx.spec.distributed.data_wait_warn
    # On CPU a tiny stand-in model's step lasts a millisecond, so any collate is a large share
    # of it and says nothing about the rented GPU: there only a wait that matters is warned about.
    if share > limit and (cuda or details["data_wait_s"] >= CPU_WAIT_FLOOR_S):
        what = "GPU" if cuda else "device"
        warnings.append(
            f"the {what} would wait for its data {share:.0%} of the time (over {limit:.0%}: raise "
            "batch.num_workers or make the collate cheaper)"
        )
    if warnings:
        return Outcome(WARN, "; ".join(warnings), details)
    return Outcome(details=details)
