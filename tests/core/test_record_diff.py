"""scripts/record_diff.py: what a rerun measures anew is left out; every other change is named."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "record_diff.py"
spec = importlib.util.spec_from_file_location("record_diff", SCRIPT)
record_diff = importlib.util.module_from_spec(spec)
spec.loader.exec_module(record_diff)


def record(**changes) -> dict:
    row = {
        "step": "steady",
        "verdict": "pass",
        "reason": "20 timed updates, 7.1 ms each (±2.0%)",
        "duration_s": 1.5,
        "memory": {"peak_rss_mb": 300.0},
        "details": {"loss_last": 3.25, "step_time_s": 0.0071, "notes": []},
    }
    for key, value in changes.items():
        if key in row["details"]:
            row["details"][key] = value
        else:
            row[key] = value
    return {"phases": [row], "environment": {"hostname": "a"}}


def test_times_memory_and_machine_notes_are_left_out() -> None:
    rerun = record(
        duration_s=2.0,
        memory={"peak_rss_mb": 310.0},
        reason="20 timed updates, 7.4 ms each (±3.1%)",
        step_time_s=0.0074,
        notes=["the machine's speed moved 15% while steady was timed"],
    )
    assert record_diff.record_differences(record(), rerun) == []


def test_a_verdict_or_a_measured_value_that_changed_is_named() -> None:
    found = record_diff.record_differences(record(), record(verdict="warn", loss_last=3.5))
    assert "phases[steady].verdict: 'pass' -> 'warn'" in found
    assert "phases[steady].details.loss_last: 3.25 -> 3.5" in found
