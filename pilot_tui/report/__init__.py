"""A record as one self-contained HTML file, and two records compared. Pure: no torch, no Textual.

    svg       inline plots (line charts, a histogram, bars)
    curves    where a record keeps its loss curves and step times, read into series
    compare   two records: what differs, nothing else
    sections  the report's sections, decision first
    page      the document around them: inline CSS, no script, nothing fetched

Built from the record (and the plan computed from it) alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..analysis.plan import Plan, decide
from . import sections
from .compare import Difference, compare_lines, differences
from .page import page

__all__ = ["Difference", "compare_lines", "differences", "report_html"]


def report_html(
    data: Mapping[str, Any],
    plan: Plan | None,
    *,
    source: str,
    price_per_hour: float | None = None,
    against: tuple[str, list[Difference]] | None = None,
    plan_error: str = "",
) -> str:
    """The report of one record: decision first, then gates, curves, memory, step times, plan
    details, notes, environment. `against`: (the other record's name, what differs)."""
    campaign = data.get("campaign") if isinstance(data.get("campaign"), Mapping) else {}
    name = str(campaign.get("name", "?"))  # type: ignore[union-attr]
    parts = []
    if plan is not None:
        parts.append(sections.decision(decide(plan, price_per_hour), plan))
    else:
        parts.append(sections.section("decision", "Decision", f"<p>No plan: {sections.esc(plan_error)}</p>"))
    if against is not None:
        parts.append(sections.comparison((source, against[0]), against[1]))
    parts += [
        sections.gates(data),
        sections.curves(data),
        sections.memory(data),
        sections.step_time(data),
    ]
    if plan is not None:
        parts.append(sections.plan_details(plan))
    parts += [sections.machine(data), sections.notes(data), sections.environment(data)]
    subtitle = (
        f"record {source} · campaign id {campaign.get('id', '?')} · created {campaign.get('created', '?')}"  # type: ignore[union-attr]
    )
    return page(f"pilot-tui report · {name}", subtitle, parts)
