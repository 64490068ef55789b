"""A peft LoRA script with two eval sets (a dict) piloted unchanged: its estimate on the adapter
alone, split and eval_longest over each eval set, the LR board validating on the set the script's
`metric_for_best_model` names, and a fit search over microbatches by changing trainer.args."""

from __future__ import annotations

import pytest

from pilot_tui.runner.trainer.adapter import adapt
from pilot_tui.runner.trainer.capture import capture
from pilot_tui.runner.trainer.data_gates import compare_splits

from .conftest import SCRIPTS, shared_campaign

pytestmark = pytest.mark.slow

# The gates this script adds something to; the others run in the plain Trainer's campaign.
SKIP = ["overfit", "steady", "save", "export", "resume", "final"]


def _args(tiny) -> list[str]:
    return ["--model", str(tiny.model), "--data", str(tiny.prompt_completion), "--output_dir", "out"]


@pytest.fixture(scope="module")
def lora(tiny, tmp_path_factory):
    return shared_campaign(
        tmp_path_factory,
        "lora",
        "lora_two_evals.py",
        _args(tiny),
        phases={"skip": SKIP},
        fit_search={"microbatches": [8]},  # one point: each is an estimate too
        lr_board={"control": 0.005, "updates": 2, "validate_every": 1},
    )


def test_every_gate_passes(lora):
    assert lora.rc == 0, lora.out
    assert set(lora.verdicts().values()) == {"pass"}, lora.verdicts()


def test_the_estimate_trains_only_the_adapter(lora):
    load, first = lora.row("load")["details"], lora.row("first_step")["details"]
    row = lora.row("estimate")["details"]
    # The control and each fit-search point, at the longest row of the trainer's datasets.
    assert [e["name"] for e in row["estimates"]] == ["control", "fit-mb8-len17"]
    control = row["estimates"][0]
    assert control["estimable"] and control["max_length"] == lora.record["dataset"]["max_length"] == 17
    # The LoRA adapter alone trains: the estimate's count is the captured model's.
    assert control["trainable_parameters"] == load["trainable_parameters"] < load["parameters"] / 10
    # The trainer's own optimizer after its first step holds AdamW's two float32 moments per
    # adapter parameter; the estimate's state is that, each of its 8 adapter tensors' moments
    # rounded up to the CUDA allocator's 512-byte blocks.
    measured = first["optimizer_state_mb"]
    assert measured == pytest.approx(8 * load["trainable_parameters"] / 2**20, abs=1e-3)
    assert measured <= control["optimizer_state_mb"] <= measured + 16 * 512 / 2**20 + 1e-3
    assert control["parameters_mb"] == pytest.approx(load["weights_mb"], rel=0.05)
    source = lora.record["estimate"]["source"]
    assert "LORA adapter r=8 (only the adapter trains)" in source
    assert "optimizer adamw_torch_fused estimated as adamw_fused" in source


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
    (point,) = fit["points"]
    # The script's effective batch (4 × 2) kept by the accumulation.
    assert (point["microbatch"], point["accumulation"], point["effective_batch"]) == (8, 1, 8)
    assert point["status"] == "fits" and point["train_peak_mb"] > 0 and point["eval_peak_mb"] > 0
    assert point["step_time_s"] > 0
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
