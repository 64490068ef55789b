"""The user's observations and decision, written into a saved record (R20). Pure, no torch.

A saved record is read-only except for these two sections, which only the user writes, on
purpose, from the CLI (`pilot-tui note`, `pilot-tui conclude`) or a key in the TUI:

- `[[notes]]`: `{target, text, time}` — an observation on the campaign, a step, a variant or a run;
- `[conclusion]`: `{text, decision, time}` — what was decided, re-readable later.

Both read the file with tomllib and write it back atomically, so a crash leaves the old record
or the new one, never a torn file.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .atomic import write_text_atomic
from .record import Record, RecordError, dumps


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def note_targets(data: Mapping[str, Any]) -> dict[str, str]:
    """Every target a note may name, with what it is: campaign, step, variant or run."""
    targets: dict[str, str] = {"campaign": "campaign"}
    spec = (data.get("campaign") or {}).get("spec") or {}
    for v in spec.get("variants") or []:
        if isinstance(v, dict) and "id" in v:
            targets.setdefault(str(v["id"]), "variant")
    for v in data.get("variants") or []:
        if isinstance(v, dict) and "id" in v:
            targets.setdefault(str(v["id"]), "variant")
    for row in data.get("phases") or []:
        if not isinstance(row, dict):
            continue
        if "step" in row:
            targets.setdefault(str(row["step"]), "step")
        variant = row.get("variant")
        if variant and row.get("name") != "lr_run":
            targets.setdefault(str(variant), "variant")
    for run in data.get("runs") or []:
        if isinstance(run, dict) and "id" in run:
            targets.setdefault(str(run["id"]), "run")
    return targets


def check_target(data: Mapping[str, Any], target: str, where: str = "record") -> str:
    """The kind of `target` in this record; RecordError (one line naming it) when it is unknown."""
    kind = note_targets(data).get(target)
    if kind is None:
        raise RecordError(
            f"{where}: note target {target!r} is not in this record "
            "(use 'campaign', a step key such as 'steady@mb1', a variant id or a run id)"
        )
    return kind


def make_note(data: Mapping[str, Any], target: str, text: str, where: str = "record") -> dict[str, Any]:
    """A validated `[[notes]]` entry; a live session may append it to its in-memory record."""
    check_target(data, target, where)
    if not text.strip():
        raise RecordError(f"{where}: a note needs some text")
    return {"target": target, "text": text.strip(), "time": _now()}


def make_conclusion(text: str, decision: str = "", where: str = "record") -> dict[str, Any]:
    """A validated `[conclusion]` table."""
    if not text.strip():
        raise RecordError(f"{where}: a conclusion needs some text")
    return {"text": text.strip(), "decision": decision.strip(), "time": _now()}


def _open(record: str | Path | Record) -> Record:
    # A live session's Record is written in place: writing its file behind its back would be
    # undone by the session's next save.
    return record if isinstance(record, Record) else Record.read(record)


def _write(record: Record) -> None:
    # Record.read opens read-only on purpose; the user's notes are the one exception, written
    # straight through the atomic writer.
    write_text_atomic(record.path, dumps(record.data))


def add_note(record_path: str | Path | Record, target: str, text: str) -> dict[str, Any]:
    """Append `{target, text, time}` to the record's `[[notes]]`; return the entry written.

    `record_path` is a saved record's file, or a live session's `Record` (updated in memory too).
    """
    record = _open(record_path)
    entry = make_note(record.data, target, text, str(record.path))
    record.data.setdefault("notes", []).append(entry)
    _write(record)
    return entry


def set_conclusion(record_path: str | Path | Record, text: str, decision: str = "") -> dict[str, Any]:
    """Set the record's `[conclusion]` to `{text, decision, time}` (a later one replaces it)."""
    record = _open(record_path)
    entry = make_conclusion(text, decision, str(record.path))
    record.data["conclusion"] = entry
    _write(record)
    return entry
