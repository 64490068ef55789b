"""Regenerate the recorded event stream the TUI tests and screenshots replay (real runner, CPU).

    .venv/bin/python tests/tui/data/make_recording.py

Writes `campaign.toml` (a small demo: every phase, short LR runs) and `recording.jsonl` (every
command sent and event received, as they crossed the pipe) beside this file, plus the record
itself as `record.toml` for the read-only tests. Only rerun it when the protocol or a phase's
output changes; snapshots taken from it must then be regenerated with --snapshot-update.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import tomllib
from pathlib import Path

import tomli_w

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))

from pilot_tui.core.record import new_record_id  # noqa: E402
from pilot_tui.session.driver import Session  # noqa: E402
from pilot_tui.session.link import ProcessLink, RecordingLink  # noqa: E402

CHANGES = {
    "task": {"options": {"n_conversations": 60, "seed": 0}},
    "batch": {"microbatch": 2, "accumulation": 2},
    "phases": {"steady_updates": 4},
    "overfit": {"examples": 8, "max_steps": 60},
    "lr_board": {"updates": 24, "validate_every": 6},
    "resume": {"k": 4, "n": 3},
}


def merge(base: dict, changes: dict) -> dict:
    out = dict(base)
    for key, value in changes.items():
        out[key] = (
            merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def main() -> int:
    raw = merge(tomllib.loads((REPO / "campaigns" / "demo.toml").read_text()), CHANGES)
    campaign = HERE / "campaign.toml"
    campaign.write_text(tomli_w.dumps(raw))
    with tempfile.TemporaryDirectory() as tmp, (HERE / "recording.jsonl").open("w") as stream:
        record_id = new_record_id()
        link = RecordingLink(ProcessLink(), stream, record_id)
        session = Session(campaign, tmp, link=link, record_id=record_id)
        session.start()
        try:
            for step in session.steps:
                for _ in session.run_step(step.key):
                    pass
            session.finish()
        finally:
            session.close()
        assert session.record is not None
        shutil.copy(session.record.path, HERE / "record.toml")
        for row in session.record.phases:
            print(
                f"{row['verdict']:<5} {row['step']:<28} {row['duration_s']:7.2f} s  {row.get('reason', '')}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
