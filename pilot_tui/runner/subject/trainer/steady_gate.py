"""`steady` on a captured trainer: its own `train()`, one untimed warm-up update, then updates
timed until the mean step time is known to the declared precision (or the timing budget ends),
as the pilot's own loop times them (`runner/timing/steady.py`).

The trainer's loop is not the pilot's to stop between updates, so a callback does it: at the
stopping rule's checkpoints it reads the step ends the probe stamped and sets
`should_training_stop`, which the trainer honours after that update's logging. `max_steps` is
the script's own run length (at least the minimum), so the learning rate follows the schedule
the real run starts with, not one squeezed into the few updates timed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import torch
from transformers import TrainerCallback

from ....analysis.loss_trend import loss_trend
from ....analysis.step_time import MeanInterval, mean_interval
from ....core.verdict import WARN
from ...context import Outcome, PhaseFailure, PhaseRun, RunContext, finite
from ...timing.speed_reference import reference_s
from ...timing.steady import (
    FrozenHeap,
    StopRule,
    agree,
    expected_updates,
    interval_details,
    load_details,
    machine_load,
    runqueue_clock,
    runqueue_share,
    spread_details,
    stop_rule,
    timing_message,
    timing_notes,
)
from . import loop
from .captured import trainer_of
from .probe import StepProbe
from .ranks import require_agreement

# The clock: the probe's host stamp at each step end, after a device synchronise on CUDA. The
# Trainer synchronises every micro-step already by default (`logging_nan_inf_filter` branches on
# `isnan(loss)`), so the stamp adds only the wait for the optimizer's kernels.
CLOCK_CPU, CLOCK_CUDA = "host", "host, synchronised each update (cuda)"


class PrecisionStop(TrainerCallback):
    """Ends the trainer's loop when steady's stopping rule says so. Added after the probe, so at
    each `on_step_end` the probe has stamped that update's end. The first update is the warm-up:
    the timed updates run from its end."""

    def __init__(self, probe: StepProbe, rule: StopRule) -> None:
        self.probe, self.rule = probe, rule
        self.check_at = rule.next_checkpoint(0)
        self.interval: MeanInterval = mean_interval([])
        self.stopped: str | None = None
        self.queue_before: tuple[float, float] | None = None
        self.queue_after: tuple[float, float] | None = None
        self.heap = FrozenHeap()

    def timed(self) -> list[float]:
        return self.probe.step_times()[1:]

    def on_step_end(self, args, state, control, **kwargs):
        ends = self.probe.ends
        n = len(ends) - 1
        if n == 0:
            # The garbage of train()'s set-up and of the phases before is not collected inside
            # the timed updates (runner/timing/steady.FrozenHeap).
            self.heap.hold()
            # On the loop's thread, at the start of the timed updates: the load they run under.
            self.queue_before = runqueue_clock()
            return control
        if n == self.check_at and self.stopped is None:
            self.interval = mean_interval(self.timed())
            # Every rank reaches the same checkpoints (counted in updates): agree() is collective.
            self.stopped = agree(self.rule.reason(n, ends[-1] - ends[0], self.interval))
            self.check_at = self.rule.next_checkpoint(n)
            if self.stopped is not None:
                control.should_training_stop = True
        if self.stopped is not None or state.global_step >= state.max_steps:
            self.queue_after = runqueue_clock()
        return control


class TokenTally:
    """The tokens each update of the trainer's own loop processed, counted at its `training_step`
    (attended positions: `attention_mask`'s non-zeros, else every input id — what the pilot's own
    loop counts) and its batch rows, for the timed updates' tokens and examples per second and
    the MFU (`phases/steady.py`).

    On the device without a sync per microbatch: one count kernel each, read once after the loop.
    Installed on the trainer instance for the loop only and put back after it."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.by_update: dict[int, list[Any]] = {}
        self.rows: dict[int, int] = {}  # examples (batch rows) per update
        # Rows are examples unless a microbatch shows otherwise: more rows than the batch size (a
        # preference collator stacks chosen and rejected), or one packed row of several examples.
        self.rows_are_examples = True
        self._own = "training_step" in vars(trainer)
        self._saved = trainer.training_step

    def __enter__(self) -> TokenTally:
        original = self._saved

        def counted(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            # The update in progress: the trainer has completed global_step of them.
            update = self.trainer.state.global_step + 1
            found = _tokens(inputs)
            if found is not None:
                self.by_update.setdefault(update, []).append(found)
            rows = _rows(inputs)
            size = int(getattr(self.trainer.args, "per_device_train_batch_size", 0) or 0)
            packed = rows == 1 < size and isinstance(inputs, Mapping) and "position_ids" in inputs
            if rows > size > 0 or packed:
                self.rows_are_examples = False
            self.rows[update] = self.rows.get(update, 0) + rows
            return original(model, inputs, *args, **kwargs)

        self.trainer.training_step = counted
        return self

    def __exit__(self, *exc: object) -> None:
        if self._own:
            self.trainer.training_step = self._saved
        else:
            del self.trainer.training_step

    def tokens(self, updates: range) -> int | None:
        """Tokens of these updates (None when the inputs had none to count)."""
        counts = [c for u in updates for c in self.by_update.get(u, [])]
        if not counts:
            return None
        return int(sum(int(c) if isinstance(c, int) else c.sum() for c in counts))

    def examples(self, updates: range) -> int | None:
        """Examples of these updates (None where the batch rows are not examples)."""
        return sum(self.rows.get(u, 0) for u in updates) if self.rows_are_examples else None


def _rows(inputs: Any) -> int:
    """The rows of a microbatch: its first tensor's leading dimension (0 when it has none)."""
    values = inputs.values() if isinstance(inputs, Mapping) else ()
    first = next((v for v in values if isinstance(v, torch.Tensor) and v.dim() > 0), None)
    return int(first.shape[0]) if first is not None else 0


def _tokens(inputs: Any) -> Any:
    # A Mapping, not only a dict: HF collators hand the trainer a BatchEncoding (a UserDict).
    if not isinstance(inputs, Mapping):
        return None
    mask, ids = inputs.get("attention_mask"), inputs.get("input_ids")
    if isinstance(mask, torch.Tensor):
        return mask.count_nonzero()
    if isinstance(ids, torch.Tensor):
        return ids.numel()
    return None


# A warm-up and one timed update: the least steady can measure.
LEAST = 2


def max_steps_for(rule: StopRule, run_updates: int) -> tuple[int, str]:
    """The `max_steps` steady's `train()` runs with, and what to say of it: the warm-up plus the
    minimum when timing a fixed count, else the script's own run length (the precision or the
    budget ends it sooner) — never past the script's run, whose schedule it follows, unless that
    run is too short to time at all, and then it says so."""
    wanted = 1 + (rule.minimum if rule.precision <= 0 else max(rule.minimum, run_updates - 1))
    if run_updates >= wanted:
        return wanted, ""
    if run_updates >= LEAST:
        return run_updates, (
            f"the script's run is {run_updates} updates: {run_updates - 1} timed after the warm-up, "
            f"fewer than the {rule.minimum} asked (phases.steady_updates)"
        )
    return LEAST, (
        f"the script's run is {run_updates} update: steady ran {LEAST} (a warm-up and one timed), "
        "past the script's own run"
    )


def steady(ctx: RunContext, run: PhaseRun) -> Outcome:
    """The trainer's own train(): one untimed warm-up update, then updates timed to a precision."""
    trainer = trainer_of(ctx)
    require_agreement(ctx)
    rule = stop_rule(ctx.spec.phases, run.overrides, ctx.spec.limit_for("steady").time_s)
    steps, capped = max_steps_for(rule, ctx.spec.batch.updates)
    probe = StepProbe()
    stop = PrecisionStop(probe, rule)

    def on_step(step: int, total: int, loss: float | None) -> None:
        # Progress in timed updates, towards the count the precision looks like it needs.
        n = max(0, step - 1)
        ctx.progress(
            run.step.key,
            n,
            expected_updates(rule, stop.interval, n),
            loss,
            timing_message(stop.interval, rule),
        )
        ctx.check_cancel()  # raising here unwinds the trainer's loop

    probe.on_step = on_step
    run.current_input = {"microbatch": trainer.args.per_device_train_batch_size, "max_steps": steps}
    cuda = trainer.args.device.type == "cuda"
    speed_before = reference_s()  # outside the trainer's loop, on its thread
    load_before = machine_load()
    t0 = time.perf_counter()
    try:
        with TokenTally(trainer) as tally:
            loop.train_steps(trainer, steps, probe, callbacks=[stop])
    finally:
        stop.heap.release()
    total = time.perf_counter() - t0
    speed = [speed_before, reference_s()]
    times = stop.timed()
    n = len(times)
    if n < 1:
        raise PhaseFailure(f"the trainer ran {len(probe.ends)} update(s): none timed after the warm-up")
    interval = mean_interval(times)
    # The loop ended at max_steps before a checkpoint of the rule: its last updates may have
    # reached the precision (or the budget) all the same; else the script's run is that short.
    stopped = stop.stopped or rule.reason(n, sum(times), interval) or "max_steps"
    losses = [r.get("loss", math.nan) for r in probe.ordered()]
    timed_s = sum(times)
    queue_share = runqueue_share(stop.queue_before, stop.queue_after, timed_s)
    notes = timing_notes(interval, rule, stopped, speed, cuda)
    if capped:
        notes.append(capped)
    if stopped == "max_steps":
        notes.append(
            f"timing stopped at the script's own run length ({steps} updates) with the mean step time "
            f"known to ±{interval.precision:.1%} (target ±{rule.precision:.0%})"
        )
    details: dict[str, Any] = {
        "updates": n,
        "warmup_updates": 1,
        "step_time_s": interval.mean_s,
        **spread_details(times),
        # How well the mean is known (analysis/step_time.py: the plan's range reads these).
        **interval_details(interval, rule, stopped, CLOCK_CUDA if cuda else CLOCK_CPU),
        "max_steps": steps,
        "train_s": total,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "losses": losses,
        "lrs": [r.get("learning_rate") for r in probe.ordered()],
        "timed": "between consecutive step ends of the trainer's own loop (data, forward, backward, optimizer, logging)",
        # The thread count, the cores and the load the times hold at (the plan's caveats read them).
        **load_details(load_before, machine_load()),
        # A fixed CPU workload's seconds just before and after train(): did the machine's speed
        # move while it was timed (runner/timing/speed_reference.py)?
        "speed_reference_s": speed,
        "notes": notes,
    }
    if queue_share is not None:
        details["runqueue_share"] = queue_share
    # The timed updates are the ones after the warm-up: global steps 2 … n + 1.
    timed_updates = range(2, n + 2)
    tokens, examples = tally.tokens(timed_updates), tally.examples(timed_updates)
    if tokens and timed_s > 0:
        details["tokens_per_s"] = tokens / timed_s
        details["timed_tokens"] = tokens
    if examples and timed_s > 0:
        details["examples_per_s"] = examples / timed_s
    bad = next((i for i, v in enumerate(losses) if not finite(v)), None)
    if bad is not None:
        raise PhaseFailure(f"non-finite loss at steady update {bad + 1}", details)
    trend = loss_trend(losses)
    if not trend.fell:
        return Outcome(WARN, trend.said(len(losses)), details)
    precision = f" (±{interval.precision:.1%})" if math.isfinite(interval.precision) else ""
    short = {
        "max_steps": f"the script's {steps}-update run ended first",
        "budget": f"its {rule.budget_s:g} s budget ended",
    }
    if precision and stopped in short and not interval.within(rule.precision):
        precision = precision[:-1] + f", short of ±{rule.precision:.0%}: {short[stopped]})"
    return Outcome(
        reason=f"{n} timed updates, {interval.mean_s * 1000:.1f} ms each{precision}", details=details
    )
