"""The machinery of the steady phase's timed loop: a clock per update, when to stop, the data feed,
and a loss for the progress bar — none of it synchronising the device inside the loop.

The loop times updates until the 95 % interval of the mean step time is within the declared
precision (`analysis/step_time.py`), so each piece here is built to cost nothing per update that a
timer or a boundary can do instead: stamps are one `perf_counter` (or one CUDA event) per update,
the stopping rule is evaluated at a geometric schedule of update counts, and the progress loss is
copied off the device asynchronously.
"""

from __future__ import annotations

import copy
import gc
import itertools
import math
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from ...analysis.step_time import (
    MIN_WINDOWS,
    WINDOWS,
    MeanInterval,
    reported_speed_move,
    run_spread,
    updates_needed,
)
from ..context import RunContext
from ..distributed import state as dist_state
from ..loop.training import TrainState
from ..memory import heap

# Progress events go out on a clock, not per update: ~4 a second is what the bar needs.
PROGRESS_PERIOD_S = 0.25
_SCHEDSTAT = Path("/proc/thread-self/schedstat")


class UpdateClock:
    """Per-update times from one stamp at the start of every update and one after the last.

    On CPU a stamp is `perf_counter`. On CUDA it is an event recorded on the stream, so the time
    between two consecutive stamps is the device's time for that update *including* any idle gap
    waiting for the host (its data, its launches); no stamp waits for the device.
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.stamps: list[float] = []
        self.events: list[torch.cuda.Event] = []
        self._known: list[float] = []  # CUDA: elapsed times already read back

    def mark(self) -> float:
        """Stamp the boundary between two updates; returns the host clock (for budgets and rates)."""
        now = time.perf_counter()
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.events.append(event)
        else:
            self.stamps.append(now)
        return now

    def ready(self) -> list[float]:
        """The per-update times known now without waiting: all of them on CPU; on CUDA those whose
        closing event the device has already passed (events complete in stream order)."""
        if not self.cuda:
            s = self.stamps
            return [b - a for a, b in itertools.pairwise(s)]
        k = len(self._known)
        while k + 1 < len(self.events) and self.events[k + 1].query():
            self._known.append(self.events[k].elapsed_time(self.events[k + 1]) / 1000)  # ms -> s
            k += 1
        return list(self._known)

    def times(self) -> list[float]:
        """Every per-update time; on CUDA call it after the loop's closing synchronize."""
        if self.cuda and self.events:
            self.events[-1].synchronize()
        return self.ready()


@dataclass(frozen=True)
class StopRule:
    """When the timed loop may end: at least `minimum` updates, then at the declared precision
    (once `min_s` of timing has passed) or when `budget_s` of timing has passed, whichever comes
    first. `precision` 0 times exactly `minimum` updates (the fixed count of records made before).

    `window`: the updates of the run the plan will predict (after its first), 0 for none. Where at
    least `MIN_WINDOWS` stretches that long fit in the budget, the precision waits for as many as
    fit, up to `WINDOWS`: a short run's own mean moves with the machine's drift over seconds,
    which only stretches as long as the run show (`analysis/step_time.window_half_width`). Where
    fewer fit, the run is long and its mean varies little: nothing more is timed."""

    minimum: int
    precision: float
    budget_s: float
    min_s: float = 0.0
    window: int = 0

    def next_checkpoint(self, n: int) -> int:
        """The update count at which to evaluate the rule next, after evaluating it at `n` (0 at
        the start): the minimum, then every ~5 % more updates (at least 10), so the O(n) interval
        costs O(n) over the whole loop. Counted in updates, never in seconds: the ranks of a
        process group reach every checkpoint together."""
        if n < self.minimum:
            return self.minimum
        return n + max(10, n // 20)

    def windows_target(self, interval: MeanInterval) -> int:
        """The timed updates the run's stretches ask for at the mean step seen so far (0: none)."""
        if self.window < 2 or self.precision <= 0 or not interval.mean_s > 0:
            return 0
        fit = min(WINDOWS, int(self.budget_s / (interval.mean_s * self.window)))
        return fit * self.window if fit >= MIN_WINDOWS else 0

    def reason(self, n: int, elapsed_s: float, interval: MeanInterval) -> str | None:
        """Why this rank would stop now ("precision", "budget", "count"), or None to go on."""
        if n < self.minimum:
            return None
        if self.precision <= 0:
            return "count"
        # A precision reached in a fraction of a second may hold for that fraction only.
        if (
            n >= 2
            and interval.within(self.precision)
            and elapsed_s >= min(self.min_s, self.budget_s)
            and n >= self.windows_target(interval)
        ):
            return "precision"
        if elapsed_s >= self.budget_s:
            return "budget"
        return None


def stop_rule(phases: Any, overrides: Mapping[str, Any], ceiling_s: float, window: int = 0) -> StopRule:
    """Steady's stopping rule from the campaign's `[phases]` and a variant's overrides; `window`,
    the updates of the run the plan predicts after its first (`StopRule`)."""
    return StopRule(
        minimum=int(overrides.get("steady_updates") or phases.steady_updates),
        precision=float(overrides.get("steady_precision", phases.steady_precision)),
        budget_s=budget_for(float(overrides.get("steady_budget_s", phases.steady_budget_s)), ceiling_s),
        min_s=float(overrides.get("steady_min_s", phases.steady_min_s)),
        window=max(0, window),
    )


# The memo key of the run spread the control's steady measured (`analysis/step_time.run_spread`).
RUN_SPREAD_KEY = "steady.run_spread"


def remember_spread(memo: dict[str, Any], details: Mapping[str, Any], window: int) -> None:
    """After the control's steady: how much a run of the planned length varied on this machine,
    for the variants timed after it (`lent_precision`)."""
    memo[RUN_SPREAD_KEY] = run_spread(details, window) if window >= 2 else None


def lent_precision(rule: StopRule, overrides: Mapping[str, Any], memo: Mapping[str, Any]) -> StopRule:
    """A variant's rule once the control measured its run spread: the plan's range for the variant
    holds that spread and the variant's own interval together (`analysis/step_time.step_range`),
    so timing its mean finer than half the spread narrows the range by under 12 % and costs four
    times the updates for each halving. A precision the variant declares itself is kept."""
    spread = memo.get(RUN_SPREAD_KEY)
    if spread is None or rule.precision <= 0 or "steady_precision" in overrides:
        return rule
    return replace(rule, precision=max(rule.precision, round(spread / 2, 4)))


def lent_note(rule: StopRule, declared: float, memo: Mapping[str, Any]) -> list[str]:
    """Words for a row whose precision target `lent_precision` loosened."""
    spread = memo.get(RUN_SPREAD_KEY)
    if spread is None or rule.precision <= declared:
        return []
    return [
        f"timed to ±{rule.precision:.1%}, not ±{declared:.0%}: a run of the planned length varied "
        f"±{spread:.1%} on this machine (the control's timed stretches), and the plan's range "
        "holds both"
    ]


def expected_updates(rule: StopRule, interval: MeanInterval, n: int) -> int:
    """The progress bar's total while timing: the minimum, or the updates the precision looks
    like it needs at the spread seen so far."""
    if rule.precision <= 0 or n < rule.minimum:
        return max(rule.minimum, n)
    needed = max(updates_needed(interval, rule.precision), rule.windows_target(interval))
    return max(n + 1, min(needed, 100 * n))


def timing_message(interval: MeanInterval, rule: StopRule) -> str:
    """The progress bar's words while timing: how well the mean is known against the target."""
    if rule.precision <= 0 or not math.isfinite(interval.precision):
        return "timing"
    known = f"timing: mean step known to ±{interval.precision:.1%} (target ±{rule.precision:.0%})"
    wanted = rule.windows_target(interval)
    if interval.within(rule.precision) and interval.n < wanted:
        # Met, yet timing goes on: say what for, or the bar looks stuck past its target.
        return f"{known}; timing {wanted // rule.window} stretches of the {rule.window}-update run"
    return known


def spread_details(times: list[float]) -> dict[str, float]:
    """The single updates' spread (p10, p50, p90 of the per-update times; at least one)."""
    ordered = sorted(times)
    return {
        "step_time_p50_s": ordered[len(ordered) // 2],
        "step_time_p90_s": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "step_time_p10_s": ordered[int(0.1 * len(ordered))],
    }


def interval_details(
    interval: MeanInterval, rule: StopRule, stopped: str | None, clock: str
) -> dict[str, Any]:
    """How well a steady row knows its mean step time: the keys `analysis/step_time.step_range`
    (the plan's range) reads, whichever loop was timed."""
    return {
        "timed_updates": interval.n,
        "step_s_mean": interval.mean_s,
        "step_s_ci95": interval.ci95_s if math.isfinite(interval.ci95_s) else -1.0,
        "step_s_precision": round(interval.precision, 5) if math.isfinite(interval.precision) else -1.0,
        "step_s_precision_target": rule.precision,
        "step_s_ci_method": interval.method,
        "timing_stopped": stopped,
        "timing_budget_s": rule.budget_s,
        "timing_min_s": rule.min_s,
        "timing_window_updates": rule.window,
        "timing_clock": clock,
    }


def times_details(times: list[float]) -> dict[str, list[float]]:
    """Every timed update's seconds (to 0.1 µs), in order: the plan reads the means of stretches
    as long as the run it predicts from them (`analysis/step_time.window_half_width`)."""
    return {"step_times_s": [round(t, 7) for t in times]}


def timing_notes(
    interval: MeanInterval, rule: StopRule, stopped: str | None, speed: list[float], cuda: bool
) -> list[str]:
    """What the row says about its timing in words: a machine whose speed moved while it was
    timed (`runner/timing/speed_reference.py`), a budget that ended timing short of its precision."""
    notes = []
    # On CUDA the step is the device's: the host's speed is not the step's.
    moved = 0.0 if cuda else reported_speed_move(speed)
    if moved:
        notes.append(
            f"the machine's speed moved {moved:.0%} while steady was timed (a fixed reference "
            f"workload took {min(speed) * 1e3:.2f}–{max(speed) * 1e3:.2f} ms before and after): "
            "its step time holds for a machine that fast to that slow, and the plan's range says so"
        )
    if stopped == "budget":
        notes.append(
            f"timing stopped at its {rule.budget_s:g} s budget with the mean step time known to "
            f"±{interval.precision:.1%} (target ±{rule.precision:.0%}) over {interval.n} updates"
        )
    return notes


class FrozenHeap:
    """Keeps what is alive before a timed loop out of the garbage collector while the loop runs.

    Python runs a full collection once the objects that survived younger ones reach a quarter
    of the long-lived heap. The work before a timed loop (imports, the model's build, the checks
    of the phases before it, a trainer's set-up) leaves that debt behind, and with torch loaded
    the collection that pays it walks the whole heap: 60-75 ms. Measured on a small GPT's CPU
    pilot whose phases ran in one process, it landed inside the first 300 timed updates (+3.6 %
    on their mean); whether it comes due there depends on the work before (in the runner's own
    process it did not, that time). A user's long run pays it once near its start, so the timed
    loop, which stands for that run's steady state, must not carry it. `gc.freeze()` moves the
    heap out of the collector's reach in constant time (a `gc.collect()` first would cost the same
    60-75 ms to every steady phase): a full collection inside the loop then walks only what the
    loop made. `release()` hands the heap back; nothing is collected or lost. A heap frozen by
    someone else already (the runner's opened heap, runner/memory/heap.py; a test's) is left as
    it is, and what was made since it was frozen is collected now instead: the phases' objects
    only, 5-10 ms measured on a piloted `sft.py`, so no debt comes due inside the loop.

    Make it before the clock starts: whether anything is frozen already is counted by walking
    the frozen objects (`gc.get_freeze_count`), ~12 ms where a heap with torch is frozen.
    `hold()` and `release()` are constant time.
    """

    def __init__(self) -> None:
        self.ours = not heap.frozen_by_someone()
        self.frozen = False
        if not self.ours:
            gc.collect()

    def hold(self) -> None:
        if self.ours and not self.frozen:
            gc.freeze()
            self.frozen = True

    def release(self) -> None:
        if self.frozen:
            gc.unfreeze()
            self.frozen = False


def agree(reason: str | None) -> str | None:
    """On several ranks the loop stops only when every rank would (they step together, and one
    that stopped alone would leave the others in a collective): a stop reason, or None to go on."""
    if not dist_state.active():
        return reason
    going = dist_state.sum_int(0 if reason else 1)
    return (reason or "precision") if going == 0 else None


def budget_for(declared_s: float, ceiling_s: float) -> float:
    """The timing budget, never more than half the phase's declared time ceiling: timing for
    precision must not turn into a phase stopped as hung."""
    if ceiling_s > 0:
        return min(declared_s, 0.5 * ceiling_s)
    return declared_s


class LossTap:
    """A recent loss for the progress bar without a device sync: on CUDA the loss is copied into
    pinned host memory asynchronously and read once its copy has landed."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.value: float | None = None
        self._pending: tuple[torch.Tensor, torch.cuda.Event] | None = None

    def offer(self, loss: torch.Tensor) -> None:
        if not self.cuda:
            self.value = float(loss)
            return
        self._land()
        if self._pending is None:
            host = torch.empty((), dtype=loss.dtype, pin_memory=True)
            host.copy_(loss.detach(), non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            self._pending = (host, event)

    def _land(self) -> None:
        if self._pending is not None and self._pending[1].query():
            self.value = float(self._pending[0])
            self._pending = None

    def latest(self) -> float | None:
        if self.cuda:
            self._land()
        return self.value


def runqueue_clock() -> tuple[float, float] | None:
    """(seconds on a CPU, seconds ready to run but waiting for one) of the calling thread so far;
    None where the kernel does not expose it. The waiting share of a timed loop is the load it ran
    under, measured rather than inferred from the load average."""
    try:
        # One raw open and read: a third of what Path.read_text costs through io's layers.
        fd = os.open(_SCHEDSTAT, os.O_RDONLY)
        try:
            running, waiting, _ = os.read(fd, 256).split()
        finally:
            os.close(fd)
        return int(running) / 1e9, int(waiting) / 1e9
    except (OSError, ValueError):
        return None


def runqueue_share(before: tuple[float, float] | None, after: tuple[float, float] | None, wall_s: float):
    """The share of `wall_s` the thread spent waiting for a CPU between two `runqueue_clock` reads."""
    if before is None or after is None or wall_s <= 0:
        return None
    return round(min(1.0, max(0.0, (after[1] - before[1]) / wall_s)), 4)


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


class _Ahead:
    """The microbatches of the updates to come, drawn from a copy of the sampler: a DataLoader
    with workers prefetches past the last update the loop takes, and the campaign's own sampler
    must advance exactly as the updates taken (a resume after steady sees the same data)."""

    def __init__(self, sampler) -> None:
        self.sampler = copy.copy(sampler)

    def __iter__(self):
        while True:
            yield from self.sampler.next_update()


def host_feed(
    ctx: RunContext, state: TrainState, delay_s: float = 0.0
) -> Iterator[tuple[list[list[int]], list[Any], float]]:
    """Updates for as long as the loop asks: (microbatch indices, host batches, seconds waited).

    With `batch.num_workers` > 0 (or pinned memory on CUDA) a real torch DataLoader collates
    them, as the campaign declared; without workers the collate runs inline, which is what a
    worker-less DataLoader does minus its per-batch bookkeeping. Either way the wait is timed
    apart, and `state.sampler` decides the order and advances one update per update taken.
    """
    b = ctx.spec.batch
    collate = partial(_collate, ctx.task, state.config.max_length, delay_s)
    pinned = b.pin_memory and ctx.device.type == "cuda"
    if b.num_workers == 0 and not pinned:
        while True:
            micro = state.sampler.next_update()
            t = time.perf_counter()
            host = [collate([ctx.task.examples[i] for i in idx]) for idx in micro]
            yield micro, host, time.perf_counter() - t
    loader = DataLoader(
        _Examples(ctx.task),
        batch_sampler=_Ahead(state.sampler),
        collate_fn=collate,
        num_workers=b.num_workers,
        pin_memory=pinned,
    )
    batches = iter(loader)
    try:
        while True:
            micro = state.sampler.next_update()
            t = time.perf_counter()
            host = [next(batches) for _ in micro]
            yield micro, host, time.perf_counter() - t
    finally:
        # Workers end now, not whenever the iterator is collected.
        shutdown = getattr(batches, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


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
