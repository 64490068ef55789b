"""A data check's result and how several combine into one gate verdict. Pure: no torch."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.rows import ALL_PASSED
from ..core.verdict import FAIL, PASS, WARN, Verdict

# How many offending ids or groups a check keeps.
SHOW_IDS = 10


@dataclass
class Check:
    """One dataset-wide check: its verdict, a sentence a user understands, the offenders."""

    name: str
    verdict: Verdict
    message: str
    count: int = 0
    ids: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "verdict": self.verdict,
            "message": self.message,
            "count": self.count,
            "ids": self.ids,
        }


@dataclass
class CheckResult:
    """Checks folded into a verdict, its reason and the row's details."""

    verdict: Verdict
    reason: str
    details: dict[str, Any]


def verdict_of(checks: Sequence[Check]) -> tuple[Verdict, str]:
    """Fail if any check fails, else warn if any warns; the reason lists failures first."""
    fails = [c.message for c in checks if c.verdict == FAIL]
    warns = [c.message for c in checks if c.verdict == WARN]
    if fails:
        return FAIL, "; ".join(fails + warns)
    if warns:
        return WARN, "; ".join(warns)
    return PASS, ALL_PASSED


def pct(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 2) if whole else 0.0


def listing(names: Sequence[str], total: int | None = None, shown: int = 3) -> str:
    """A few names for a reason line ("a, b, c and 12 more")."""
    total = len(names) if total is None else total
    more = f" and {total - shown} more" if total > shown else ""
    return ", ".join(names[:shown]) + more


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection during a whole-dataset scan. A scan allocates many small
    objects while the dataset holds many more, so each collection walks them all again; the
    scans build no reference cycles, and reference counting still frees everything."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
