"""A gate's verdict — pass, warn or fail — and the one word a cancelled step is known by. Pure.

A verdict is a `StrEnum`: it is the string the record and the wire hold (`Verdict.PASS == "pass"`),
so every record written so far reads, and TOML or JSON writes it as the bare word.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any


class Verdict(StrEnum):
    """A row's, a check's or a rank's verdict; ordered pass < warn < fail."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"

    @property
    def ok(self) -> bool:
        """Pass or warn: the gate let the campaign through."""
        return self is not Verdict.FAIL

    @property
    def rank(self) -> int:
        return _RANK[self]

    @classmethod
    def read(cls, value: Any) -> Verdict:
        """The verdict a record field holds; anything else reads as a fail (never as a pass)."""
        try:
            return cls(value)
        except ValueError:
            return cls.FAIL


PASS, WARN, FAIL = Verdict.PASS, Verdict.WARN, Verdict.FAIL
_RANK = {PASS: 0, WARN: 1, FAIL: 2}


def worst(verdicts: Iterable[Any]) -> Verdict:
    """fail > warn > pass; an empty list is a fail (nothing was measured)."""
    found = [Verdict.read(v) for v in verdicts]
    return max(found, key=lambda v: v.rank) if found else FAIL


# A step stopped before it ended (the cancel key, SIGTERM, a hang-up) fails with this reason and
# `cancelled = true` in its row; it was interrupted, not judged, so it runs again.
CANCELLED = "cancelled"
CANCELLED_BY_USER = "cancelled by the user"
