"""What the dashboard knows about each step, as immutable values the panes draw from.

Handlers on the UI thread *replace* a gate's state rather than mutate it, so a pane that kept a
reference never sees a half-updated row (memray's frozen snapshots).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..core.rows import Memory, PhaseRow, StepKey
from ..core.verdict import FAIL, PASS, WARN

# A step's status before it has a row; then its row's verdict.
WAITING, QUEUED, RUNNING = "waiting", "queued", "running"
MARKS = {WAITING: "·", QUEUED: "…", RUNNING: "▶", PASS: "✓", WARN: "!", FAIL: "✗"}


@dataclass(frozen=True)
class GateState:
    """One step's row: waiting / queued / running (with progress) / pass / warn / fail."""

    key: str
    label: str
    phase: str
    variant: str = "control"
    status: str = WAITING
    done: int = 0
    total: int = 0
    loss: float | None = None
    message: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    # The finished step's row, read once through core.rows (None until it has one).
    row: PhaseRow | None = None

    def with_(self, **changes: Any) -> GateState:
        return replace(self, **changes)

    @property
    def finished(self) -> bool:
        return self.status in (PASS, WARN, FAIL)


def read_row(row: Any) -> PhaseRow:
    """A record or wire row, typed; one naming no phase reads as the fail row it is (shown as
    what it is, never dropped silently)."""
    typed = PhaseRow.from_toml(row)
    if typed is None:
        return PhaseRow(name="?", step=StepKey("?"), verdict=FAIL, raw=row if isinstance(row, dict) else {})
    return typed


def gate_from_row(row: Any) -> GateState:
    """The state of a finished step as the record holds it."""
    typed = read_row(row)
    if typed.name == "?":
        return GateState(key="?", label="? (unreadable row)", phase="?", status=FAIL, row=typed)
    return GateState(
        key=typed.key,
        label=typed.label,
        phase=typed.name,
        variant=typed.variant,
        status=typed.verdict,
        params=dict(typed.params),
        row=typed,
    )


def fmt_mb(value: Any) -> str:
    """Memory in MiB, or a dash when absent (never a made-up zero)."""
    if not isinstance(value, int | float):
        return "—"
    return f"{value:,.0f} MiB" if value >= 10 else f"{value:.1f} MiB"


def fmt_short_mb(value: Any) -> str:
    """A compact MiB figure for narrow table cells (GiB above 10 GiB)."""
    if not isinstance(value, int | float):
        return "—"
    return f"{value / 1024:.1f} GiB" if value >= 10240 else fmt_mb(value)


def memory_columns(m: Memory) -> tuple[str, str]:
    """(peak allocated, peak reserved) on CUDA, or (peak RSS, "") on CPU; never summed (R6)."""
    if m.on_cuda:
        return fmt_short_mb(m.peak_allocated_mb), fmt_short_mb(m.peak_reserved_mb)
    if m.peak_rss_mb is not None:
        return fmt_short_mb(m.peak_rss_mb) + " RSS", ""
    return "—", "—"


def bar(done: int, total: int, width: int = 10) -> str:
    """A text progress bar for a table cell."""
    if total <= 0:
        return "░" * width
    filled = max(0, min(width, round(width * done / total)))
    return "█" * filled + "░" * (width - filled)


def fmt_duration(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "—"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, sec = divmod(round(seconds), 60)
    return f"{minutes}m{sec:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def fmt_value(value: Any) -> str:
    """A record value as one short readable string."""
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return str(value)
        if value == 0:
            return "0"
        if abs(value) < 1e-3 or abs(value) >= 1e6:
            return f"{value:.3g}"
        return f"{value:.4g}"
    if isinstance(value, list):
        if all(not isinstance(v, dict | list) for v in value):
            text = ", ".join(fmt_value(v) for v in value[:12])
            return f"[{text}{', …' if len(value) > 12 else ''}]"
        return f"[{len(value)} items]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {fmt_value(v)}" for k, v in list(value.items())[:8]) + "}"
    return str(value)


def next_variant_id(taken: set[str]) -> str:
    """`v1`, `v2`, … never reusing an id already in the campaign or the record (R14)."""
    n = 1
    while f"v{n}" in taken:
        n += 1
    return f"v{n}"
