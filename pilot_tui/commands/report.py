"""`pilot-tui report RECORD [-o FILE.html] [--against B]` and `pilot-tui compare A B`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from ..analysis.plan import Plan
from ..core.atomic import write_text_atomic
from ..core.record import Record, RecordError
from ..core.text import one_line
from ..report import compare_lines, differences, report_html
from .plan import plan_of


def _plan(record: Record) -> tuple[Plan | None, str]:
    """The record's plan, or why there is none (a report still shows everything else)."""
    try:
        return plan_of(record), ""
    except RecordError as exc:
        return None, str(exc)


def write_report(
    record_path: str | Path,
    out_path: str | Path | None = None,
    *,
    against: str | Path | None = None,
    price_per_hour: float | None = None,
) -> Path:
    """Write the report of a record (default: beside it, `.html`); returns the file written."""
    record = Record.read(record_path)  # RecordError: exit 2
    plan, error = _plan(record)
    versus = None
    if against is not None:
        other = Record.read(against)
        versus = (str(other.path), differences(record.data, other.data, plan, _plan(other)[0]))
    text = report_html(
        record.data,
        plan,
        source=str(record.path),
        price_per_hour=price_per_hour,
        against=versus,
        plan_error=error,
    )
    target = Path(out_path) if out_path is not None else record.path.with_suffix(".html")
    write_text_atomic(target, text)
    return target


def print_compare(a_path: str | Path, b_path: str | Path, out: TextIO | None = None) -> int:
    """Print what differs between two records; exit 0 when they match, 1 when something differs."""
    a, b = Record.read(a_path), Record.read(b_path)
    found = differences(a.data, b.data, _plan(a)[0], _plan(b)[0])
    out = out or sys.stdout
    for line in compare_lines((str(a.path), str(b.path)), found):
        print(one_line(line, 1000), file=out)
    out.flush()
    return 1 if found else 0
