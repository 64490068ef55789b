"""How a fresh-capture variant's phases share one process, and what a process that fails hands
back: pure functions on a real spec, no process started."""

from __future__ import annotations

from pathlib import Path

from pilot_tui.core.spec import load_spec
from pilot_tui.runner.subject.trainer.fresh_variant import handed_back, phases_for

CAMPAIGN = """[campaign]
name = "sft"

[task]
trainer_script = "train.py"
args = ["--model", "m"]

[[variants]]
id = "bf16"
args = ["--bf16"]
"""


def _spec(tmp_path: Path, extra: str = ""):
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "campaign.toml").write_text(CAMPAIGN + extra)
    return load_spec(tmp_path / "campaign.toml").spec


def test_one_process_runs_the_variants_remaining_phases(tmp_path):
    spec = _spec(tmp_path)
    assert phases_for(spec, "first_step", {}) == ["first_step", "steady", "eval_longest"]
    assert phases_for(spec, "steady", {}) == ["steady", "eval_longest"]
    # A rerun from the view with overrides measures that phase alone.
    assert phases_for(spec, "first_step", {"microbatch": 2}) == ["first_step"]


def test_skipped_phases_and_ceilings(tmp_path):
    skipped = _spec(tmp_path, '\n[phases]\nskip = ["steady"]\n')
    assert phases_for(skipped, "first_step", {}) == ["first_step", "eval_longest"]
    # A ceiling must not cover the other phases' work: one process per phase then.
    ceiling = _spec(tmp_path, "\n[limits.steady]\ntime_s = 60\n")
    assert phases_for(ceiling, "first_step", {}) == ["first_step"]
    assert phases_for(ceiling, "eval_longest", {}) == ["eval_longest"]


def test_a_process_that_dies_keeps_the_rows_it_wrote():
    row = {"name": "first_step", "verdict": "pass", "reason": "ok"}
    result = {"capture": {"argv": ["--bf16"], "capture_s": 1.5}, "rows": [row], "process_peak_rss_mb": 900.0}
    got = handed_back(result, ["first_step", "steady", "eval_longest"], "killed (signal 9)", 12.0)
    assert got["first_step"]["verdict"] == "pass"
    assert got["first_step"]["capture"] == {
        "argv": ["--bf16"],
        "capture_s": 1.5,
        "process_s": 12.0,
        "process_peak_rss_mb": 900.0,
    }
    assert (
        got["steady"]
        == got["eval_longest"]
        == ("the fresh capture's process ended after first_step: killed (signal 9)")
    )


def test_a_capture_that_fails_fails_every_phase_with_its_line():
    line = "train.py: exited with status 2 before calling train(): error: argument --bf16: unknown"
    got = handed_back({}, ["first_step", "steady"], line, 3.0)
    assert got == {
        p: f"the fresh capture with the variant's args/env failed: {line}" for p in ("first_step", "steady")
    }
