"""A sequence-classification Trainer script (`AutoModelForSequenceClassification`, its own loss,
`DataCollatorWithPadding`) piloted unchanged: every gate speaks a classifier's terms; and its
twin whose loss averages each microbatch, which fails only where it accumulates.

What transformers really does here is measured, not assumed: a sequence classifier's forward
takes **kwargs, so the Trainer leaves the division by num_items_in_batch to a loss that ignores it
— at accumulation a every update is a× too large. The script trains at accumulation 1: its
control warns with the measured factor and the cure (measured too); a variant that accumulates
fails.
"""

from __future__ import annotations

import importlib.util
import sys
import tomllib

import pytest

from pilot_tui.commands.cli import main

from .conftest import LATER, SCRIPTS, run_in_process

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def classifier(tiny):
    spec = importlib.util.spec_from_file_location("tiny_assets", SCRIPTS / "tiny_assets.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["tiny_assets"] = module
    spec.loader.exec_module(module)
    return module.build_classifier(tiny)


def _args(classifier) -> list[str]:
    model, data = classifier
    return ["--model", str(model), "--data", str(data), "--output_dir", "out"]


@pytest.fixture(scope="module")
def run(classifier, tmp_path_factory):
    return run_in_process(
        tmp_path_factory.mktemp("classify"),
        "classify.py",
        _args(classifier),
        replay={"inputs": ["rev: abc = cba", "up: abc = ABC"]},
        variants=[{"id": "mb2", "microbatch": 2}],  # accumulation 4: the update a× too large
        phases={"steady_updates": 10, "skip": []},  # the estimate too: a classifier's head
    )


def test_the_classifier_campaign_passes_where_its_updates_are_right(run) -> None:
    verdicts = run.verdicts()
    assert verdicts["first_step@mb2"] == "fail", run.out  # it accumulates: a real fault, named
    others = {s: v for s, v in verdicts.items() if s != "first_step@mb2"}
    assert set(others.values()) <= {"pass", "warn"}, run.out
    assert [s for s, v in others.items() if v == "warn"] == ["first_step"], run.out


def test_first_step_at_accumulation_1_warns_with_the_measured_factor_and_the_cure(run) -> None:
    row = run.row("first_step")
    acc = row["details"]["accumulation"]
    assert not acc["ok"] and acc["grad_norm_narrow"] / acc["grad_norm_wide"] == pytest.approx(8, rel=0.01)
    assert acc["cured"]["ok"]  # the cure the row names, measured: the same update
    reason = row["reason"]
    assert "does not accumulate (accumulation 1)" in reason and "8× the gradient" in reason
    assert "examples" in reason and "token" not in reason  # a classifier's words
    assert "trainer.model_accepts_loss_kwargs = False" in reason
    failed = run.row("first_step@mb2")["reason"]
    assert "accumulates 4 microbatches" in failed and "not examples" in failed


def test_inspect_shows_classes_by_name_and_checks_the_class_map(run) -> None:
    d = run.row("inspect")["details"]
    assert d["kind"] == "classification" and d["class_names"] == ["rev", "sort", "up"]
    assert [c["count"] for c in d["class_counts"]] == [40, 40, 40]
    checks = {c["name"]: c["verdict"] for c in d["checks"]}
    assert checks["class_map"] == "pass" and checks["label_meaning"] == "pass"
    assert d["examples"][0]["text"].endswith(d["examples"][0]["name"])


def test_overfit_and_final_in_a_classifiers_terms(run) -> None:
    assert "of the examples" in run.row("overfit")["reason"]
    controls = run.row("final")["details"]["controls"]
    assert [c["output"].split()[1] for c in controls] == ["rev", "up"]
    estimate = run.row("estimate")
    assert estimate["verdict"] == "pass", estimate["reason"]


def test_steady_counts_the_tokens_a_padding_collator_hands_the_trainer(run) -> None:
    # DataCollatorWithPadding hands the trainer a BatchEncoding (a UserDict, not a dict): its
    # attended tokens and rows are counted all the same, for the throughput and the MFU.
    d = run.row("steady")["details"]
    assert d["timed_tokens"] > 0 and d["tokens_per_s"] > 0 and d["examples_per_s"] > 0
    assert d["mfu"]["model_tflops"] > 0


def test_a_loss_averaged_per_microbatch_fails_only_where_it_accumulates(classifier, tmp_path) -> None:
    twin = run_in_process(
        tmp_path,
        "classify_mean_loss.py",
        _args(classifier),
        variants=[{"id": "mb8", "microbatch": 8}],  # the same effective batch at accumulation 1
        phases={"skip": [p for p in LATER if p != "steady"]},
    )
    verdicts = twin.verdicts()
    assert verdicts["first_step"] == "fail" and verdicts["first_step@mb8"] == "warn", twin.out
    reason = twin.row("first_step")["reason"]
    assert "accumulates 4 microbatches" in reason and "MeanLossTrainer.compute_loss" in reason
    assert "divide by num_items_in_batch" in reason


def test_init_writes_no_prompt_masking_for_a_classifier(classifier, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init", "--trainer", str(SCRIPTS / "classify.py"), "--", *_args(classifier)]) == 0
    written = (tmp_path / "campaign.toml").read_text()
    assert "sequence classifier" in written
    assert "supervise_prompt" not in tomllib.loads(written)["task"]
