"""`first_step` (allocates optimizer state, R5) and `steady` (updates timed to a precision)."""

from __future__ import annotations

import hashlib
import time
from typing import Any

import psutil
import torch

from ....analysis import rank_data
from ....analysis.loss_trend import loss_trend
from ....analysis.plan.package import full_run_updates
from ....analysis.step_time import mean_interval
from ....core.verdict import WARN
from ...checks import finiteness
from ...checks.numerics import describe, run_ab
from ...context import Outcome, PhaseFailure, PhaseRun, RunContext, finite
from ...distributed import state as dist_state
from ...loop import objective_gate
from ...loop.training import TrainConfig, TrainState, UpdateStats, train_update
from ...memory.probes import device_reserve, forget_peaks, host_rss_mb, synchronize, tensor_mb
from ...processes import template
from ...timing.speed_reference import reference_s
from ...timing.steady import (
    PROGRESS_PERIOD_S,
    FrozenHeap,
    LossTap,
    UpdateClock,
    agree,
    expected_updates,
    host_feed,
    interval_details,
    lent_note,
    lent_precision,
    load_details,
    machine_load,
    remember_spread,
    runqueue_clock,
    runqueue_share,
    spread_details,
    stop_rule,
    times_details,
    timing_message,
    timing_notes,
)
from . import numerics


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


MAX_SCALER_SKIPS = 32


def example_key(example: Any) -> str:
    """An example's id, or a hash of its fields when it has none: an index would call two
    differently ordered datasets the same."""
    if "id" in example:
        return str(example["id"])
    return hashlib.sha256(repr(sorted(example.items())).encode()).hexdigest()[:16]


def _same_split_on_every_rank(ctx: RunContext) -> None:
    """Under torchrun every rank builds its task and its split on its own: they must agree."""
    if dist_state.world() < 2:
        return
    ids = [example_key(ex) for ex in ctx.task.examples]
    mine = rank_data.split_digest(ctx.splits, ids)
    digests: list[str] = [""] * dist_state.world()
    torch.distributed.all_gather_object(digests, mine)
    problem = rank_data.split_mismatch(digests)
    if problem:
        raise PhaseFailure(problem, {"split_digests": digests})


def fragmentation_details(
    first: tuple[float, float, float] | None, last: tuple[float, float, float] | None, timed: int
) -> dict[str, dict[str, float]]:
    """Reserved − allocated after the first and the last timed update (CUDA): its slope per
    update, which the plan projects to the update where reserved memory reaches the GPU's."""
    if first is None or last is None:
        return {}
    gap_first, gap_last = first[0] - first[1], last[0] - last[1]
    return {
        "fragmentation": {
            "gap_first_mb": round(gap_first, 3),
            "gap_last_mb": round(gap_last, 3),
            "reserved_last_mb": round(last[0], 3),
            "gpu_total_mb": round(last[2], 1),
            "updates_between": max(timed - 1, 0),
            "slope_mb_per_update": round((gap_last - gap_first) / max(timed - 1, 1), 6),
        }
    }


def _pilots_own() -> list[int]:
    """The pilot's own processes beside the run's (its template process): not the run's memory."""
    tmpl = template.current()
    return [tmpl.proc.pid] if tmpl is not None else []


def host_rss_details(first: tuple[float, int], last: tuple[float, int], timed: int) -> dict[str, float]:
    return {
        "first_mb": round(first[0], 3),
        "last_mb": round(last[0], 3),
        "processes": last[1],
        "updates_between": max(timed - 1, 0),
        "slope_mb_per_update": round((last[0] - first[0]) / max(timed - 1, 1), 6),
        "machine_total_mb": round(psutil.virtual_memory().total / 2**20, 1),
    }


def _regrouping_explained(
    ctx: RunContext, state: TrainState, variant: str, message: str, details: dict[str, Any]
) -> list[str]:
    """The same update regrouped into other microbatches differs. Before blaming the loss's
    normalisation, what else makes a microbatch's size matter is measured: a kernel that computes
    something else (a mask ignored: a padded microbatch differs from an unpadded one) fails, named
    first; packed documents that see each other (a pack holds other neighbours at another size)
    warn, named first. Neither: the normalisation fault, as the check says."""
    difference = message.split(" — ")[0]
    found = run_ab(numerics.task_probe(ctx, state))
    if not found["within"]:
        details["numerics"] = found
        raise PhaseFailure(
            f"{describe(found).message}; the update regrouped into other microbatches differs too "
            f"({difference}), which that component explains first",
            details,
        )
    packed = ctx.training.packing_isolation(ctx, variant)
    if packed and packed.get("compared") and not packed.get("isolated", True):
        details["packing"] = packed
        return [
            f"packed documents see each other ({packed['compared']} compared alone and in the pack: per-token "
            f"losses {packed['worst_token_loss_gap']:.2e} apart): the update regrouped into other microbatches "
            f"differs too ({difference}) because a pack's neighbours change with its size — not a loss "
            "normalisation fault; restart the positions at each document (or a block-diagonal mask)"
        ]
    raise PhaseFailure(message, details)


def first_update(ctx: RunContext, run: PhaseRun) -> Outcome:
    variant = run.step.variant
    state = ctx.state(variant, ctx.config(variant, run.overrides))
    if state.step != 0:  # the first step must be a real first step: fresh optimizer state
        ctx.states.pop(variant)
        state = ctx.state(variant, ctx.config(variant, run.overrides))
    _same_split_on_every_rank(ctx)
    micro = state.sampler.next_update()
    # From the state before the update: the same examples regrouped, and the task's own loss.
    checks = {
        "accumulation_check": objective_gate.accumulation(state, ctx.task, micro, ctx.device),
        "reference_loss": objective_gate.reference(state, ctx.task, micro, ctx.device),
    }
    forget_peaks(ctx.device)  # the row's memory is the update's, not the checks'
    started = time.perf_counter()
    stats = _update(ctx, run, state, micro)
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
    loss, gn = float(stats.loss), float(stats.grad_norm)  # on a GPU these wait for the update
    details = {
        # The update alone, without the checks before it: what a run's first update costs (the
        # plan's startup), its optimizer state allocated on the way.
        "update_s": time.perf_counter() - started,
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
    details |= {name: objective_gate.public(c) for name, c in checks.items()}
    accumulated = checks["accumulation_check"]
    warnings: list[str] = []
    if accumulated["ran"] and not accumulated["_result"].ok:
        warnings += _regrouping_explained(ctx, state, variant, accumulated["message"], details)
    found = gradless(state.model)
    details |= found
    warnings += [_gradless_reason(found)] if found["gradless_parameters"] else []
    ref = checks["reference_loss"]
    if ref["ran"] and not ref["_result"].ok:
        warnings.append(ref["message"])
    if warnings:
        return Outcome(WARN, "; ".join(warnings), details)
    return Outcome(details=details)


# Data wait per update below which a CPU steady row does not warn (see steady()).
CPU_WAIT_FLOOR_S = 0.005


def loop_own_details(step_s: float, wait_s: float, model_s: float) -> dict[str, float]:
    """What of a CPU update was the pilot's own loop, not the model's work nor the data's.

    An update's time is its data wait (the task's collate), the model's work (zeroing, forward
    and loss, backward, clipping, the optimizer's step: `UpdateStats.model_s`) and the rest: the
    pilot drawing batch indices, counting supervised targets, reading the loss, stepping the
    schedule, stamping its clock. A plain loop around the same model may do less of that, so the
    plan's range reaches this much lower (`analysis/step_time.step_range`). On CUDA the host's
    stamps time launches, not the device, and the loop's host work overlaps it: not recorded.
    """
    own = max(step_s - wait_s - model_s, 0.0)
    return {
        "model_s": model_s,
        "loop_own_s": own,
        "loop_own_share": own / step_s if step_s > 0 else 0.0,
    }


def planned_updates(ctx: RunContext, config: TrainConfig) -> int:
    """The updates of the run the plan projects for this configuration (`analysis/plan/package`):
    `plan.dataset_size` × `plan.epochs` where the campaign declares the full dataset, else the
    pilot's own declared budget. Steady times stretches of that run's length only where several
    fit in its budget: a rental's run is far longer, and its mean varies by no more than it is known to."""
    updates, _, _ = full_run_updates(
        ctx.spec,
        len(ctx.splits["train"]),
        config.effective_batch,
        config.microbatch,
        config.accumulation,
        max(1, config.replicas),
    )
    return updates


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
    p, ov = ctx.spec.phases, run.overrides
    # The run the plan will predict, after its first update (StopRule's window). Only the control
    # times stretches of it: how a run that long drifts is the machine's, and the plan lends it to
    # the variants, which stop at their precision (seconds each, not the budget).
    window = planned_updates(ctx, state.config) - 1 if variant == "control" else 0
    declared = stop_rule(p, ov, ctx.spec.limit_for("steady").time_s, window)
    rule = declared if variant == "control" else lent_precision(declared, ov, ctx.memo)
    taken = state.step  # updates already taken: a failure is named by the campaign's update number
    losses: list[Any] = []
    examples, tokens, model_s = 0, 0, 0.0
    skips: list[bool] = []
    cuda = ctx.device.type == "cuda"
    # CUDA runs asynchronously: a host clock around one update times its launch, not its kernels;
    # the clock's events time each update on the device without a sync per step.
    clock, tap = UpdateClock(ctx.device), LossTap(ctx.device)
    feed = host_feed(ctx, state, float(ov.get("collate_delay_s") or 0.0))
    waits: list[float] = []
    synchronize(ctx.device)
    heap = FrozenHeap()  # the earlier phases' garbage is not collected inside the timing
    speed_before = reference_s()  # outside the timed loop, on its thread
    load_before, queue_before = machine_load(), runqueue_clock()
    n, stopped, interval = 0, None, mean_interval([])
    rss_first = rss_last = (0.0, 0)
    reserve_first: tuple[float, float, float] | None = None
    reserve_last: tuple[float, float, float] | None = None
    check_at = rule.next_checkpoint(0)
    heap.hold()
    t0 = next_progress = clock.mark()
    try:
        while stopped is None:
            ctx.check_cancel()
            micro, host, wait = next(feed)  # its wait is part of the update's time, and counted apart
            waits.append(wait)
            stats = _update(ctx, run, state, micro, host)
            now = clock.mark()
            n += 1
            if n == 1:
                # The workers started: the host memory (and device reserve) the run begins on.
                rss_first = host_rss_mb(_pilots_own())
                reserve_first = device_reserve(ctx.device)
            # On a CPU the float now (it is already on the host): no tensor per update kept
            # alive through the ones that follow; on a GPU reading it would sync the device.
            losses.append(stats.loss if cuda else float(stats.loss))
            skips.append(stats.skipped)
            examples += stats.examples
            tokens += stats.tokens
            model_s += stats.model_s
            if n == check_at:
                interval = mean_interval(clock.ready())
                stopped = agree(rule.reason(n, now - t0, interval))
                check_at = rule.next_checkpoint(n)
            if now >= next_progress or stopped is not None:
                # On a clock, not per update: each event is serialised, piped and drawn.
                next_progress = now + PROGRESS_PERIOD_S
                tap.offer(stats.loss)
                total = n if stopped is not None else expected_updates(rule, interval, n)
                ctx.progress(run.step.key, n, total, tap.latest(), timing_message(interval, rule))
        rss_last = host_rss_mb(_pilots_own())  # before the workers end with the feed
        reserve_last = device_reserve(ctx.device)
    finally:
        heap.release()
        feed.close()
    synchronize(ctx.device)
    elapsed = time.perf_counter() - t0
    queue_share = runqueue_share(queue_before, runqueue_clock(), elapsed)
    speed = [speed_before, reference_s()]
    times = clock.times()
    interval = mean_interval(times)
    timed = interval.mean_s * n  # the timed loop's total: throughput and shares divide the same figure
    values = torch.stack(losses).tolist() if cuda else losses  # one copy to the host, not one per update
    details = {
        "updates": n,
        "warmup_updates": 1,
        # The plan's mean: every timed update's wall time, its data wait included.
        "step_time_s": interval.mean_s,
        **spread_details(times),
        # How well the mean is known (analysis/step_time.py: the plan's range reads these).
        **interval_details(interval, rule, stopped, "cuda events" if cuda else "host"),
        **times_details(times),
        **load_details(load_before, machine_load()),
        # A fixed CPU workload's seconds just before and after the loop: did the machine's speed
        # move while it was timed (runner/timing/speed_reference.py)?
        "speed_reference_s": speed,
        # The host memory of this process and its loader workers over the timed loop: a slope the
        # plan projects to the hour it reaches the machine's memory (analysis/plan/caveats.py).
        "host_rss": host_rss_details(rss_first, rss_last, n),
        **fragmentation_details(reserve_first, reserve_last, n),
        "examples_per_s": examples / timed,
        "tokens_per_s": tokens / timed,
        "loss_first": values[0],
        "loss_last": values[-1],
        "losses": values,
        "notes": notes,
        # Waiting in next(DataLoader iterator) against the whole timed loop (R22).
        "data_wait_s": sum(waits) / n,
        "data_wait_share": min(1.0, sum(waits) / timed) if timed > 0 else 0.0,
        "loader": {"num_workers": ctx.spec.batch.num_workers, "pin_memory": ctx.spec.batch.pin_memory},
    }
    if not cuda:
        details |= loop_own_details(interval.mean_s, details["data_wait_s"], model_s / n)
    if queue_share is not None:
        # The share of the loop the timing thread was ready but waited for a CPU: the load it ran under.
        details["runqueue_share"] = queue_share
    notes += timing_notes(interval, rule, stopped, speed, cuda)
    notes += lent_note(rule, declared.precision, ctx.memo)
    if variant == "control":
        remember_spread(ctx.memo, details, window)
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
    trend = loss_trend([start, *values])
    if not trend.fell:
        warnings.append(trend.said(n + 1))
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
