"""A peft LoRA script with two eval sets (a dict) piloted unchanged: split and eval_longest over
each eval set, the LR board validating on the set the script's `metric_for_best_model` names, and
a fit search over microbatches by changing trainer.args."""

from __future__ import annotations

import pytest

from pilot_tui.runner.subject.trainer.adapter import adapt
from pilot_tui.runner.subject.trainer.capture import capture
from pilot_tui.runner.subject.trainer.data_gates import compare_splits

from .conftest import SCRIPTS, shared_campaign

pytestmark = pytest.mark.slow

# The gates this script adds something to; the others run in the plain Trainer's campaign (its
# estimate too: a peft model's is counted in test_trainer_estimate.py, in this process).
SKIP = ["estimate", "machine", "overfit", "steady", "save", "export", "resume", "final"]


def _args(tiny) -> list[str]:
    return ["--model", str(tiny.model), "--data", str(tiny.prompt_completion), "--output_dir", "out"]


@pytest.fixture(scope="module")
def lora(tiny, tmp_path_factory):
    return shared_campaign(
        tmp_path_factory,
        "lora",
        "lora_two_evals.py",
        _args(tiny),
        in_process=True,
        phases={"skip": SKIP},
        fit_search={"microbatches": [2, 8]},
        lr_board={"control": 0.005, "updates": 2, "validate_every": 1},
    )


def test_every_gate_passes(lora):
    assert lora.rc == 0, lora.out
    assert set(lora.verdicts().values()) == {"pass"}, lora.verdicts()


def test_split_and_eval_longest_cover_each_eval_set(lora):
    split = lora.row("split")["details"]
    assert set(split["eval_sets"]) == {"eval_other", "eval_rev"} and split["same_input"] == 0
    assert split["eval_examples"] == lora.row("load")["details"]["eval_examples"] > 0
    sets = lora.row("eval_longest")["details"]["eval_sets"]
    assert set(sets) == {"eval_other", "eval_rev"}
    assert all(s["eval_loss"] > 0 and s["examples"] > 0 for s in sets.values())


def test_the_board_validates_on_the_set_metric_for_best_model_names(lora):
    (run,) = lora.record["runs"]
    assert run["validation_metric"] == "eval_rev_loss"  # not the dict's first set, eval_other
    assert [p["update"] for p in run["validation"]] == [0, 1, 2]
    assert run["final_validation"] == run["validation"][-1]["loss"] > 0


def test_the_fit_search_changes_the_trainer_args_in_place(lora):
    fit = lora.record["fit"]
    # The script's effective batch (4 × 2) kept by the accumulation at every point.
    points = {p["microbatch"]: p for p in fit["points"]}
    assert {mb: (p["accumulation"], p["effective_batch"]) for mb, p in points.items()} == {
        2: (4, 8),
        8: (1, 8),
    }
    for p in points.values():
        assert (
            p["status"] == "fits"
            and p["train_peak_mb"] > 0
            and p["eval_peak_mb"] > 0
            and p["step_time_s"] > 0
        )
    assert fit["largest_microbatch"] == 8 and fit["accumulation"] == 1


def test_an_eval_set_drawn_from_the_whole_data_fails_split(tiny, tmp_path):
    # The twin's capture and the split gate's own comparison, in this process (a headless run of
    # it would spend a capture and a runner start on one row).
    adapter = adapt(capture(SCRIPTS / "lora_two_evals_leak.py", _args(tiny), cwd=tmp_path).trainer)
    outcome = compare_splits(adapter)
    assert outcome.verdict == "fail"
    by_set = outcome.details["same_input_by_set"]
    # Its reversals that fell in the train split are found; the held-out ones are not.
    assert 0 < by_set["eval_rev"] < len(adapter.evals()["eval_rev"])
    assert by_set["eval_other"] == 0
    assert "eval_rev:" in outcome.reason and "memorisation" in outcome.reason


ONLY_OVERFIT = [
    "estimate",
    "inspect",
    "split",
    "load",
    "first_step",
    "steady",
    "eval_longest",
    "save",
    "export",
    "resume",
    "final",
]


@pytest.mark.parametrize(("lr", "verdict"), [(0.01, "warn"), (1e-9, "fail")])
def test_overfit_over_a_frozen_base_names_it_and_says_not_learnt_only_when_nothing_moved(
    tiny, tmp_path, lr, verdict
):
    """LoRA over a frozen base and head: the adapters lower the loss of the tiny subset, not to
    the absolute target in 80 steps — a warning naming the frozen parts, never "not learnt"; a
    learning rate at which the adapters cannot move it is the twin that fails."""
    from .conftest import run_in_process

    run = run_in_process(
        tmp_path,
        "lora_two_evals.py",
        _args(tiny),
        phases={"skip": ONLY_OVERFIT},
        overfit={"examples": 4, "max_steps": 80, "lr": lr},
    )
    row = run.row("overfit")
    assert row["verdict"] == verdict, run.out
    frozen = row["details"]["frozen"]
    assert frozen["frozen_share"] > 0.9 and "lm_head" in frozen["modules"]
    assert "frozen" in row["reason"] and ("not learnt" in row["reason"]) == (verdict == "fail")
