"""A captured trainer's steady never runs past the script's own run without saying so."""

from __future__ import annotations

from pilot_tui.runner.subject.trainer.steady_gate import max_steps_for
from pilot_tui.runner.timing.steady import StopRule


def rule(minimum: int, precision: float) -> StopRule:
    return StopRule(minimum=minimum, precision=precision, budget_s=10.0)


def test_the_scripts_run_caps_the_updates_and_the_row_says_why() -> None:
    # A --max_steps 8 script, steady_updates 10: 8 updates, the schedule of 8, and a note.
    steps, said = max_steps_for(rule(10, 0.03), 8)
    assert steps == 8 and "the script's run is 8 updates: 7 timed after the warm-up" in said
    steps, said = max_steps_for(rule(10, 0.0), 8)
    assert steps == 8 and "fewer than the 10 asked" in said


def test_a_long_enough_run_is_timed_as_before() -> None:
    assert max_steps_for(rule(10, 0.03), 200) == (200, "")  # the precision ends it sooner
    assert max_steps_for(rule(10, 0.0), 200) == (11, "")  # a fixed count: warm-up + 10


def test_a_one_update_run_is_timed_past_it_and_says_so() -> None:
    steps, said = max_steps_for(rule(10, 0.03), 1)
    assert steps == 2 and "past the script's own run" in said
