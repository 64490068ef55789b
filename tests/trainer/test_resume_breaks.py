"""The resume check fails where exactness really breaks: a collator that draws from the global
RNG (random label dropping, as MLM masking does) — the trainer restores the RNG only after the
first window after a resume is fetched, so that window differs."""

from __future__ import annotations

import textwrap

import pytest

from .conftest import run_in_process

pytestmark = pytest.mark.slow

SCRIPT = """
    import sys

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    class DropLabels:
        # Drops a random 30% of the labels of every batch: its own "augmentation".
        def __call__(self, rows):
            ids = torch.tensor([r["input_ids"] for r in rows])
            labels = ids.clone()
            labels[torch.rand(labels.shape) < {share}] = -100
            return {{"input_ids": ids, "labels": labels}}

    model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
    rows = [[1 + (i * 7 + j) % 300 for j in range(12)] for i in range(64)]
    args = TrainingArguments(output_dir="out", per_device_train_batch_size=4, report_to="none", learning_rate=1e-3)
    trainer = Trainer(model=model, args=args, train_dataset=Dataset.from_dict({{"input_ids": rows}}),
                      data_collator=DropLabels())
    trainer.train()
"""


# Process C may start ahead: beside the LR board's run, or beside the estimate while its step
# waits for the fork computing it (a data check starts that fork). It runs the script there, then
# waits for run A's checkpoint (runner/subject/trainer/resume_gate.py). Every way must catch the break.
BOARD = {"control": 1e-3, "variants": [], "seeds": [0], "updates": 2, "validate_every": 2}
BESIDE = {"": [], "lr_run": ["lr_run"], "estimate": ["inspect", "estimate"]}
WAYS = pytest.mark.parametrize("ahead", ["", "lr_run", "estimate"], ids=["in-turn", "lr-board", "estimate"])


def _run(tiny, tmp_path, share: float, ahead: str = ""):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT.format(share=share)))
    keep = ["stack", "resume", *BESIDE[ahead]]
    from pilot_tui.core import phase_table

    skip = [p for p in phase_table.names() if p not in keep]
    board = {"lr_board": BOARD} if ahead == "lr_run" else {}
    run = run_in_process(
        tmp_path,
        str(script),
        [str(tiny.model)],
        phases={"skip": skip},
        task={"supervise_prompt": True},
        **board,
    )
    said = run.row("resume")["details"].get("resume_process_ahead", "")
    assert said.startswith(f"started before run A, beside {ahead}") == bool(ahead), said
    return run


@WAYS
def test_a_collator_drawing_from_the_rng_breaks_the_resume(tiny, tmp_path, ahead):
    run = _run(tiny, tmp_path, 0.3, ahead)
    assert run.rc == 1, run.out
    row = run.row("resume")
    assert row["verdict"] == "fail"
    assert "differs from the uninterrupted one from step 3" in row["reason"], row["reason"]
    # And the pilot names the cause: the collator's batches change with the RNG state.
    assert "the collator DropLabels draws from the RNG" in row["reason"]
    first = row["details"]["steps"][0]
    assert not first["loss_same"] and first["loss_a"] != first["loss_c"]


@WAYS
def test_its_twin_without_randomness_resumes_bitwise(tiny, tmp_path, ahead):
    run = _run(tiny, tmp_path, 0.0, ahead)  # torch.rand still drawn, nothing dropped: the same bits
    row = run.row("resume")
    assert row["verdict"] == "pass", run.out
    assert row["details"]["causes"] == []
