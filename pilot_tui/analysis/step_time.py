"""How precisely a steady phase knows its mean step time, and the range a plan may quote from it.

Pure functions, shared by the runner (when to stop timing) and the plan (what to print):

- `mean_interval(times)`: the mean per-update time and the half-width of its 95 % confidence
  interval. Step times on a shared machine come in bursts (another process holds a core for a
  second, then leaves), so consecutive updates are not independent and a plain `t · s/√n` is too
  narrow. Past `BLOCKS` updates the interval is computed from the means of `BLOCKS` contiguous
  blocks (the batch-means method): a burst moves one block mean, and the spread of block means
  carries it into the interval.
- `step_range(details, updates)`: the per-update range a plan multiplies by its updates, from a
  steady row's details: the confidence interval — for a run of `updates` updates, the prediction
  interval of that run's own mean, which a short run needs (its mean varies too) and a long one
  does not — widened by the contention the timed loop measured
  (`runqueue_share`, the share of the loop the timing thread was ready to run but waited for a
  CPU). On a CPU the low end is the interval on an idle machine, the high end on one twice as
  busy as the pilot's; the caveat says so in words. It is widened again when a fixed reference
  workload timed before and after the loop (`speed_reference_s`) ran at different speeds: the
  host slowed or sped the machine while it was timed, unseen by the run queue.
- `window_half_width(times, updates)`: for a run short enough that steady timed several stretches
  of its length (`step_times_s`), the spread of those stretches' means. A virtual machine's speed
  also drifts over seconds: a 200-update run's mean moves with it, but blocks a tenth of a second
  long do not show that drift, so their spread cannot say how much a whole short run varies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Contiguous blocks for the batch-means interval; 20 keeps 19 degrees of freedom.
BLOCKS = 20
# The precision a steady phase times to by default: ±3 % of the mean at 95 % confidence.
DEFAULT_PRECISION = 0.03

# Stretches of a planned run's length: steady times up to WINDOWS of them, as many as fit in its
# budget, and their means give that run's own spread from MIN_WINDOWS on. With five, t(4) and a
# spread known to ±35 % made ranges by chance too narrow to hold a 200-update run on a drifting VM.
WINDOWS = 8
MIN_WINDOWS = 3

# A move of the reference workload's speed below this is its own run-to-run noise: not reported.
SPEED_MOVED_FLOOR = 0.10

# Student's t, two-sided 95 % (the 0.975 quantile), for 1..30 degrees of freedom.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom (inf for df < 1)."""
    if df < 1:
        return math.inf
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964  # the normal quantile, with the first terms of its expansion in 1/df
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class MeanInterval:
    """A mean step time and the half-width of its 95 % confidence interval, in seconds."""

    n: int
    mean_s: float
    ci95_s: float
    # "per update" (each update its own sample) or "20 blocks" (batch means).
    method: str

    @property
    def precision(self) -> float:
        """The half-width relative to the mean (0.03 is ±3 %); inf before two samples."""
        return self.ci95_s / self.mean_s if self.mean_s > 0 and math.isfinite(self.ci95_s) else math.inf

    def within(self, target: float) -> bool:
        return self.precision <= target


def _blocks(times: Sequence[float], count: int) -> list[float]:
    """Means of `count` contiguous blocks whose sizes differ by at most one."""
    n = len(times)
    size, extra = divmod(n, count)
    out, start = [], 0
    for b in range(count):
        end = start + size + (1 if b < extra else 0)
        out.append(math.fsum(times[start:end]) / (end - start))
        start = end
    return out


def mean_interval(times: Sequence[float], blocks: int = BLOCKS) -> MeanInterval:
    """The mean of `times` and its 95 % interval: per update up to `blocks` samples, then from
    the means of `blocks` contiguous blocks (see the module docstring)."""
    n = len(times)
    if n == 0:
        return MeanInterval(0, 0.0, math.inf, "per update")
    mean = math.fsum(times) / n
    samples, method = (
        (list(times), "per update") if n <= blocks else (_blocks(times, blocks), f"{blocks} blocks")
    )
    k = len(samples)
    if k < 2:
        return MeanInterval(n, mean, math.inf, method)
    centre = math.fsum(samples) / k
    var = math.fsum((x - centre) ** 2 for x in samples) / (k - 1)
    return MeanInterval(n, mean, t975(k - 1) * math.sqrt(var / k), method)


def updates_needed(interval: MeanInterval, target: float) -> int:
    """About how many updates reach `target` precision at the spread seen so far (the half-width
    shrinks as 1/√n): what a progress bar can show as its total."""
    if interval.within(target):
        return interval.n
    if not math.isfinite(interval.precision):
        return interval.n * 2
    return math.ceil(interval.n * (interval.precision / target) ** 2)


def speed_moved(reference: Any) -> float:
    """How much the machine's speed moved between the reference workload's timings: slowest over
    fastest, minus one (0.0 without two positive finite timings, as in a hostile record)."""
    values = _positives(reference)
    return max(values) / min(values) - 1 if len(values) >= 2 else 0.0


def reported_speed_move(reference: Any) -> float:
    """`speed_moved`, or 0.0 when it is within the reference's own noise (below the floor)."""
    moved = speed_moved(reference)
    return moved if moved >= SPEED_MOVED_FLOOR else 0.0


@dataclass(frozen=True)
class StepRange:
    """The per-update time a plan can quote: low ≤ mean ≤ high, seconds, and why it is that wide."""

    low_s: float
    mean_s: float
    high_s: float
    ci95_s: float
    timed_updates: int
    precision: float
    runqueue_share: float
    speed_moved: float
    caveat: str


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def run_half_width(ci: float, timed: int, updates: int | None) -> float:
    """The 95 % half-width for the mean step of a run of `updates` updates, from the half-width
    `ci` of the mean of `timed` timed ones: the prediction interval of a future mean,
    t·s·√(1/n + 1/N) = ci·√(1 + n/N). A run as short as the pilot's timing varies as much again
    (√2); a rental's millions of updates vary by nothing more than the mean is known to (ci).
    With batch means the same holds: s is the spread of blocks of n/k updates, and a run of N
    updates is N·k/n such blocks."""
    if updates is None or updates < 1 or timed < 1:
        return ci
    return ci * math.sqrt(1 + timed / updates)


def window_half_width(times: Sequence[float], updates: int | None) -> tuple[float, int] | None:
    """The 95 % half-width for the mean step of one run of `updates` updates from the means of
    the k consecutive stretches of about that many timed updates: the prediction interval of one
    more such mean, t(k−1)·s·√(1 + 1/k), and k. It holds whatever the machine's speed did over
    the run's own length (a drift of seconds moves a stretch's mean as it moves the run's), where
    `run_half_width` assumes blocks far shorter than the run are independent. None with fewer
    than `MIN_WINDOWS` stretches (a run too long for the timing to hold several of it)."""
    if updates is None or updates < 2:
        return None
    k = len(times) // updates
    if k < MIN_WINDOWS:
        return None
    # The batch-means interval over k blocks is t(k−1)·s/√k: × √k × √(1 + 1/k) = × √(k + 1).
    return mean_interval(times, k).ci95_s * math.sqrt(k + 1), k


def _positives(value: Any) -> list[float]:
    """The positive finite numbers of a recorded list (a hostile record's others left out)."""
    if not isinstance(value, Sequence) or isinstance(value, str):
        return []
    return [v for v in (_num(x) for x in value) if v is not None and v > 0]


def pilot_speeds(rows: Sequence[Mapping[str, Any]]) -> list[float]:
    """Every reference-workload timing the pilot's rows recorded (stack's at its start, each
    steady's on both sides of its loop): the speeds this machine ran at during the pilot."""
    out: list[float] = []
    for details in rows:
        if isinstance(details, Mapping):
            out += _positives(details.get("speed_reference_s"))
    return out


def run_spread(details: Mapping[str, Any], updates: int | None) -> float | None:
    """The relative half-width the means of timed stretches of `updates` updates showed in one
    steady row (None where it timed fewer than `MIN_WINDOWS` of them): the machine's own drift
    over a run that long, which holds for every configuration timed on the same machine."""
    mean = _num(details.get("step_s_mean"))
    windows = window_half_width(_positives(details.get("step_times_s")), updates)
    if windows is None or mean is None or mean <= 0:
        return None
    return windows[0] / mean


def step_range(
    details: Mapping[str, Any],
    updates: int | None = None,
    speeds: Sequence[float] = (),
    borrowed_spread: float | None = None,
) -> StepRange | None:
    """The per-update range from a steady row's details, for a run of `updates` steady updates
    (None: the mean's own interval), never narrower than the stretches of that run's length
    recorded in `step_times_s` show (`window_half_width`); None for a row that recorded no
    interval (records made before steady timed to a precision). `speeds`: the reference timings of the rest of the
    pilot (`pilot_speeds`): a machine whose speed moved during the pilot may run the real run at
    any of those speeds, so the range spans them too. `borrowed_spread`: another configuration's
    `run_spread` on the same machine, for a row timed only to its precision (the memory variants
    leave the stretches to the control): the range is never narrower than that share of the mean.

    [mean − w, mean + w] with w the half-width for that run (`run_half_width`), then on a CPU
    × (1 − share) at the low end and × (1 + share) at the high end, where share is the measured `runqueue_share` of the timed loop: on an idle machine
    the loop would not have waited, on one twice as busy it would have waited about twice as long.
    On a CPU the low end is also × (1 − own), own being the measured `loop_own_share` of an update
    spent in the pilot's own loop around the model's work (`runner/subject/task/updates.py`): the
    user's plain loop around the same model may do none of it.
    """
    mean, ci = _num(details.get("step_s_mean")), _num(details.get("step_s_ci95"))
    if mean is None or ci is None or mean <= 0 or ci < 0:  # ci −1: a single update has no interval
        return None
    n = int(_num(details.get("timed_updates")) or 0)
    share = min(max(_num(details.get("runqueue_share")) or 0.0, 0.0), 0.9)
    on_cpu = str(details.get("timing_clock", "host")) == "host"
    widen = share if on_cpu else 0.0
    # At most half an update: a larger figure is not a loop's bookkeeping but a damaged record.
    own = min(max(_num(details.get("loop_own_share")) or 0.0, 0.0), 0.5) if on_cpu else 0.0
    # The loop ran somewhere between the reference's fastest and slowest speed: at either end of
    # it, a step would take (1 + moved) times less or more.
    moved_here = reported_speed_move(details.get("speed_reference_s")) if on_cpu else 0.0
    moved = max(moved_here, reported_speed_move([*pilot_speeds([details]), *speeds])) if on_cpu else 0.0
    half = run_half_width(ci, n, updates)
    # A run short enough for steady to have timed several stretches of it: their means' spread.
    windows = window_half_width(_positives(details.get("step_times_s")), updates)
    if windows is None and borrowed_spread is not None and updates and updates >= 2:
        # k 0: the stretches were another configuration's. The run varies by the borrowed share
        # and this row's mean is known to ±ci: two independent errors, both in the range.
        windows = (math.hypot(borrowed_spread * mean, ci), 0)
    widened_by_windows = windows is not None and windows[0] > half
    if windows is not None:
        half = max(half, windows[0])
    low = max(mean - half, 0.0) * (1 - widen) * (1 - own) / (1 + moved)
    high = (mean + half) * (1 + widen) * (1 + moved)
    precision = ci / mean
    target = _num(details.get("step_s_precision_target"))
    parts = [f"±{precision:.1%} at 95 % confidence over {n} timed updates"]
    # Worth saying only where it widens the range: a run not many times longer than the timing.
    if widened_by_windows and windows is not None and windows[1] == 0:
        parts.append(
            f"±{half / mean:.1%} for a run of {updates:,} updates: the control's timed stretches of "
            f"that length varied ±{borrowed_spread or 0:.1%} on this machine, and this mean is known "
            f"to ±{precision:.1%}"
        )
    elif widened_by_windows and windows is not None:
        parts.append(
            f"±{half / mean:.1%} for a run of {updates:,} updates: the means of {windows[1]} timed "
            f"stretches of {updates:,} updates each varied that much"
        )
    elif half > ci * 1.05 and updates:
        parts.append(
            f"±{half / mean:.1%} for a run of {updates:,} updates (a short run's own mean varies too)"
        )
    if target and precision > target:
        # Why timing stopped short: its budget, or a trainer script's run ended first.
        why = {"budget": "its time budget", "max_steps": "the end of the script's own run (max_steps)"}
        stopped = why.get(str(details.get("timing_stopped")), "")
        parts.append(
            f"short of the ±{target:.0%} target" + (f": timing stopped at {stopped}" if stopped else "")
        )
    if own >= 0.005:
        parts.append(
            f"{own:.1%} of each timed update was the pilot's own loop (drawing the batch, counting "
            "targets, reading the loss, the schedule's step, its clock): the low end is a plain loop "
            "around the same model doing none of it"
        )
    if widen >= 0.01:
        parts.append(
            f"the timed loop waited for a CPU {share:.0%} of its time (other load): the range spans "
            "an idle machine to one twice as busy"
        )
    if moved and moved_here >= moved:
        parts.append(
            f"the machine's speed moved {moved:.0%} while steady was timed (a fixed reference workload, "
            "timed before and after): the range spans both speeds"
        )
    elif moved:
        parts.append(
            f"the machine's speed moved {moved:.0%} during the pilot (a fixed reference workload, timed "
            "at its start and around each steady): the range spans the slowest and the fastest"
        )
    return StepRange(
        low_s=low,
        mean_s=mean,
        high_s=high,
        ci95_s=ci,
        timed_updates=n,
        precision=precision,
        runqueue_share=share,
        speed_moved=moved,
        caveat="; ".join(parts),
    )
