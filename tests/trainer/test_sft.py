"""TRL `SFTTrainer` scripts piloted unchanged: chat data under `assistant_only_loss`, and
prompt/completion with `packing=True` (padding-free rows, documents split by `position_ids`)."""

from __future__ import annotations

import pytest

from .conftest import LATER, NO_FINAL, passes_every_phase, run_campaign, run_in_process, shared_campaign

pytestmark = pytest.mark.slow


def _chat_args(tiny) -> list[str]:
    return ["--model_name_or_path", str(tiny.model), "--dataset", str(tiny.chat), "--output_dir", "out"]


@pytest.fixture(scope="module")
def chat(tiny, tmp_path_factory):
    return shared_campaign(
        tmp_path_factory,
        "chat",
        "sft_chat.py",
        _chat_args(tiny),
        in_process=True,
        replay={"inputs": ["rev: abc"]},
        # Two LRs through args.learning_rate, the trainer's own evaluate() every 2 updates.
        lr_board={"control": 0.002, "variants": [0.02], "updates": 4, "validate_every": 2},
    )


@pytest.fixture(scope="module")
def packed(tiny, tmp_path_factory):
    args = [
        "--model_name_or_path", str(tiny.model),
        "--dataset_path", str(tiny.prompt_completion),
        "--output_dir", "out",
        "--max_length", "64",
        "--per_device_train_batch_size", "2",
        "--bf16", "false",
        "--eval_strategy", "steps",
        "--learning_rate", "0.005",
    ]  # fmt: skip
    # Packing changes the batches, not the export: the chat campaign checks the final reload.
    return shared_campaign(
        tmp_path_factory, "packed", "sft_packing.py", args, in_process=True, phases=NO_FINAL
    )


def test_chat_passes_every_phase(chat):
    passes_every_phase(chat)
    assert chat.row("load")["details"]["trainer"] == "SFTTrainer"


def test_chat_scores_the_replies_and_their_end_of_turn(chat):
    d = chat.row("inspect")["details"]
    check = next(c for c in d["checks"] if c["name"] == "end_supervised")
    assert check["verdict"] == "pass"
    tokens = d["examples"][0]["tokens"]
    scored = [t["piece"] for t in tokens if t["role"] == "supervised"]
    assert "<|end|>" in scored and "<|user|>" not in scored


def test_chat_resume_is_bitwise(chat):
    steps = chat.row("resume")["details"]["steps"]
    assert steps and all(s["digest_same"] and s["loss_same"] for s in steps)


def test_packed_passes_every_phase(packed):
    passes_every_phase(packed)


def test_packed_rows_show_their_document_boundaries(packed):
    d = packed.row("inspect")["details"]
    (window,) = d["loader_windows"]
    assert window["document_boundaries"] > 0
    first = d["examples"][0]
    assert first["documents"] > 1
    boundary = [i for i, t in enumerate(first["tokens"]) if t.get("boundary")]
    # The first token of each packed document is context: never predicted from the previous one.
    assert boundary and all(first["tokens"][i]["role"] != "supervised" for i in boundary)
    assert "│" in first["text"]
    check = next(c for c in d["checks"] if c["name"] == "document_boundaries")
    assert check["verdict"] == "pass"


def test_end_of_turn_outside_the_mask_fails_inspect(tiny, tmp_path):
    run = run_in_process(tmp_path, "sft_chat_end_unmarked.py", _chat_args(tiny), phases={"skip": LATER})
    assert run.rc == 1, run.out
    row = run.row("inspect")
    assert row["verdict"] == "fail" and "never learns to stop" in row["reason"]


def test_a_template_without_generation_markers_is_bad_input(tiny, tmp_path):
    run = run_campaign(tmp_path, "sft_chat_no_markers.py", _chat_args(tiny))
    assert run.rc == 2, run.out
    (line,) = [ln for ln in run.out.splitlines() if ln.startswith("pilot-tui: error:")]
    assert "sft_chat_no_markers.py: line " in line and "before calling train()" in line
    assert "generation" in line
    assert run.record is None


def test_chat_lr_board_runs_their_trainer_from_one_start(chat):
    runs = chat.record["runs"]
    assert [r["lr"] for r in runs] == [0.002, 0.02]
    assert all(r["status"] == "completed" for r in runs)
    # Same starting weights and the same first batches at every LR of the seed.
    assert len({r["initial_weights_sha256"] for r in runs}) == 1
    assert len({r["first_batches_sha256"] for r in runs}) == 1
    for r in runs:
        assert [p["update"] for p in r["validation"]] == [0, 2, 4]
        assert len(r["losses"]) == 4
    assert runs[0]["validation"][0]["loss"] == runs[1]["validation"][0]["loss"]
    assert runs[0]["losses"][-1] != runs[1]["losses"][-1]  # the LR really changed the run
    assert chat.record["board"]["control"]
