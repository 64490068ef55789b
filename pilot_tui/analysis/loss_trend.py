"""Whether a phase's loss fell, judged on window means rather than two single updates. Pure.

One update's loss moves with the examples it happens to hold: a steady phase timed to its
precision takes tens of updates, and comparing its last single loss with its first warns on noise.
The mean of the first quarter against the mean of the last quarter keeps the verdict about the
trend (with four updates or fewer it is the first against the last, as before).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LossTrend:
    """The first and last window means of a loss curve, and the window's length."""

    first: float
    last: float
    window: int

    @property
    def fell(self) -> bool:
        return self.last < self.first

    def said(self, updates: int) -> str:
        """The warning's words: over how many updates, from which mean to which."""
        span = f"{self.first:.4g} -> {self.last:.4g}"
        if self.window > 1:
            span += f", means of the first and last {self.window}"
        return f"loss did not fall over {updates} updates ({span})"


def loss_trend(losses: Sequence[float]) -> LossTrend:
    """Window means of `losses` (in order, every one finite); a quarter of them, at least one."""
    if not losses:
        raise ValueError("no loss to judge")
    window = max(1, len(losses) // 4)
    return LossTrend(sum(losses[:window]) / window, sum(losses[-window:]) / window, window)
