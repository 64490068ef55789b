"""Bad campaign files refused by `load_spec`: one line naming the file, the key and the line.

The fixtures live in tests/data/bad/ (each says what is wrong in its first line). Cases that
only the runner can see (the task file's code, the data) are in tests/runner/test_bad_campaigns.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pilot_tui.core.spec import SpecError, load_spec

BAD = Path(__file__).resolve().parent.parent / "data" / "bad"

# file -> fragments the message must hold (the key, and the line where the file has one).
SPEC_CASES: dict[str, tuple[str, ...]] = {
    "syntax_error.toml": ("TOML syntax error", "line 11"),
    "unknown_key.toml": ("line 10: batch.micro_batch: unknown key", "did you mean 'microbatch'"),
    "unknown_section.toml": ("line 22: optimiser: unknown section", "did you mean 'optim'"),
    "wrong_type.toml": ("line 10: batch.microbatch: expected an integer, got string '2'",),
    "microbatch_zero.toml": ("line 10: batch.microbatch: must be ≥ 1, got 0",),
    "accumulation_zero.toml": ("line 11: batch.accumulation: must be ≥ 1, got 0",),
    "negative_max_length.toml": ("line 12: batch.max_length: must be ≥ 0", "got -5"),
    "missing_microbatch.toml": ("line 9: batch.microbatch: required key is missing",),
    "missing_campaign.toml": ("campaign: required section [campaign] is missing",),
    "bad_precision.toml": ("line 13: batch.precision: must be one of fp32, bf16, fp16, got 'fp8'",),
    "split_sum.toml": ("line 17: split: train + validation + test must be 1, got 0.9",),
    "hold_without_updates.toml": ("batch.updates: hold = 'updates' needs updates ≥ 1",),
    "builtin_and_file.toml": ("line 5: task: set exactly one of task.builtin or task.file",),
    "missing_task_file.toml": ("line 6: task.file: no such file 'tasks/no_such_task.py'",),
    "bad_campaign_name.toml": ("line 3: campaign.name: use letters, digits",),
}
# Valid specs whose task or data is bad: only the runner finds out (tests/runner/test_bad_campaigns.py).
RUNNER_CASES = {
    "task_syntax_error.toml",
    "task_import_error.toml",
    "task_raises.toml",
    "task_not_a_task.toml",
    "task_empty.toml",
    "task_no_group_key.toml",
    "task_no_function.toml",
    "too_small.toml",
    "unknown_builtin.toml",
    "builtin_option_float.toml",
    "builtin_option_huge.toml",
    "builtin_option_ok.toml",  # their correct twin: it opens
}


@pytest.mark.parametrize("name", sorted(SPEC_CASES))
def test_bad_spec_is_refused_with_one_line_naming_key_and_line(name):
    path = BAD / name
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    for fragment in SPEC_CASES[name]:
        assert fragment in message, message


def test_every_fixture_is_covered_and_the_runner_cases_are_valid_specs():
    assert {p.name for p in BAD.glob("*.toml")} == set(SPEC_CASES) | RUNNER_CASES
    for name in sorted(RUNNER_CASES):
        load_spec(BAD / name)  # the spec itself is fine: the problem is the task or the data


def test_missing_campaign_file():
    with pytest.raises(SpecError, match=r"nope\.toml: campaign file not found"):
        load_spec(BAD / "nope.toml")


# Values that type-check but would crash or mislead later: refused before anything runs.
VALUE_CASES: dict[str, tuple[dict, str]] = {
    "infinite lr": ({"optim": {"lr": float("inf")}}, "optim.lr: expected a finite number, got inf"),
    "nan tolerance": ({"resume": {"tolerance": float("nan")}}, "resume.tolerance: expected a finite number"),
    "infinite LR in a list": (
        {"lr_board": {"variants": [5e-5, float("inf")]}},
        "lr_board.variants[1]: expected a finite number",
    ),
    "skip typo": ({"phases": {"skip": ["stedy"]}}, "phases.skip: unknown phase 'stedy'"),
    "negative loss_below": ({"overfit": {"loss_below": -1.0}}, "overfit.loss_below: must be > 0"),
    "variant equal to the control": (
        {"variants": [{"id": "same", "microbatch": 2, "precision": "fp32"}]},
        "variant 'same' changes nothing from the control",
    ),
    "two LRs with one run name": (
        {"lr_board": {"control": 1e-4, "variants": [1.0000001e-4]}},
        "lr_board.variants: two LRs give the same run name",
    ),
    "empty extension name": ({"task": {"requires": ["numpy", " "]}}, "task.requires: a module name is empty"),
}


@pytest.mark.parametrize("case", sorted(VALUE_CASES))
def test_values_that_would_mislead_later_are_refused(write_campaign, case):
    changes, fragment = VALUE_CASES[case]
    path = write_campaign(changes)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_every_phase_name_may_be_skipped_and_a_changed_field_is_a_variant(write_campaign):
    from pilot_tui.core.phase_table import names

    load_spec(write_campaign({"phases": {"skip": list(names())}}))
    # The FAST control has microbatch 2: a variant with microbatch 1 changes something.
    load_spec(write_campaign({"variants": [{"id": "mb1", "microbatch": 1, "precision": "fp32"}]}))


def test_the_old_control_section_reads_as_replay_and_both_at_once_are_refused(write_campaign):
    """`[control] inputs` is the old name of `[replay] inputs`: campaigns written with it still run."""
    new = load_spec(write_campaign({"replay": {"inputs": ["up:abc"]}}))
    old = load_spec(write_campaign({"control": {"inputs": ["up:abc"]}}, drop=("replay",)))
    assert new.spec.replay == old.spec.replay and old.spec.replay.inputs == ["up:abc"]
    with pytest.raises(SpecError, match=r"control: the old name of \[replay\]: keep only \[replay\]"):
        load_spec(write_campaign({"control": {"inputs": ["up:abc"]}}))
    # An error inside the old section names the key the file holds.
    with pytest.raises(SpecError, match=r"line \d+: control\.inputs: expected an array"):
        load_spec(write_campaign({"control": {"inputs": "up:abc"}}, drop=("replay",)))
