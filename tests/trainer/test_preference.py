"""A TRL `DPOTrainer` script piloted unchanged: its label-less pairs read by their completion
mask; and a broken twin whose rejected column is a copy of the chosen one."""

from __future__ import annotations

import json

import pytest

from .conftest import LATER, locked, run_in_process, shared_campaign, shared_root

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def preference(tiny, tmp_path_factory):
    """The prompt/completion rows as a user's preference file: the reply good, its reverse bad."""
    path = shared_root(tmp_path_factory) / "trainer-preference" / "preference.jsonl"
    with locked(path):
        if not path.is_file():
            rows = [json.loads(line) for line in tiny.prompt_completion.read_text().splitlines()]
            lines = [
                json.dumps({"question": r["prompt"], "good": r["completion"], "bad": r["completion"][::-1]})
                for r in rows
            ]
            path.write_text("\n".join(lines) + "\n")
    return path


def _args(tiny, data) -> list[str]:
    return ["--model", str(tiny.model), "--data", str(data), "--output_dir", "out"]


@pytest.fixture(scope="module")
def dpo(tiny, preference, tmp_path_factory):
    # resume and final are the trainer's own paths, run by the SFT campaigns: skipped here.
    return shared_campaign(
        tmp_path_factory,
        "dpo",
        "dpo.py",
        _args(tiny, preference),
        in_process=True,
        phases={"steady_updates": 3, "skip": ["estimate", "machine", "resume", "final"]},
    )


def test_the_pairs_are_read_by_their_completion_mask_and_every_gate_passes(dpo):
    verdicts = dpo.verdicts()
    assert dpo.rc == 0 and {verdicts[g] for g in ("inspect", "overfit", "first_step", "export")} == {
        "pass"
    }, dpo.out
    inspect = dpo.row("inspect")["details"]
    checks = {c["name"]: c for c in inspect["checks"]}
    assert checks["preference_pairs"]["verdict"] == "pass"
    assert checks["supervised_tokens"]["verdict"] == "pass"
    # The prompt is context: a pair's scored tokens are its completion (and its end token).
    assert checks["prompt_supervision"]["verdict"] == "pass"
    # The script cut its rows itself: no "max_length 0" the pilot never applied.
    assert "max_length 0" not in checks["responses_cut"]["message"]
    assert dpo.row("overfit")["details"]["loss_last"] < dpo.row("overfit")["details"]["loss_first"]


def test_a_rejected_column_copied_from_chosen_fails_inspect_naming_the_pairs(tiny, preference, tmp_path):
    run = run_in_process(tmp_path, "dpo_same_pair.py", _args(tiny, preference), phases={"skip": LATER})
    row = run.row("inspect")
    assert run.rc == 1 and row["verdict"] == "fail", run.out
    checks = {c["name"]: c for c in row["details"]["checks"]}
    assert checks["preference_pairs"]["verdict"] == "fail"
    assert "reject the very completion they choose" in row["reason"]


def test_steady_counts_a_pairs_tokens_but_no_examples_from_its_doubled_rows(dpo):
    # The preference collator stacks each pair's chosen and rejected rows: every token the model
    # reads is counted, but a row is not an example, so no examples per second is claimed.
    d = dpo.row("steady")["details"]
    assert d["timed_tokens"] > 0 and d["tokens_per_s"] > 0
    assert "examples_per_s" not in d
