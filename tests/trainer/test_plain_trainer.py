"""A plain transformers `Trainer` script (argparse, its own `compute_loss` over
`num_items_in_batch`, its own collator) piloted unchanged; and its two broken twins."""

from __future__ import annotations

import os

import pytest

from .conftest import LATER, passes_every_phase, run_in_process, shared_campaign

pytestmark = pytest.mark.slow
VARIANT_PHASES = ("first_step", "steady", "eval_longest")


def _args(tiny) -> list[str]:
    return ["--model", str(tiny.model), "--data", str(tiny.prompt_completion), "--output_dir", "out"]


@pytest.fixture(scope="module")
def plain(tiny, tmp_path_factory):
    return shared_campaign(
        tmp_path_factory,
        "plain",
        "plain_trainer.py",
        _args(tiny),
        replay={"inputs": ["rev: abc ="]},
        phases={"steady_updates": 3},  # the estimate included
        variants=[
            # Memory variants by changing trainer.args in place (the effective batch kept: 2 × 4).
            {"id": "mb2", "microbatch": 2},
            {"id": "ckpt", "activation_checkpointing": True},
            # Fixed when the script builds its trainer: a fresh capture with accelerate's own variable
            # (what `accelerate launch --mixed_precision bf16` sets; a plain `--bf16` needs a GPU here).
            {"id": "bf16", "env": {"ACCELERATE_MIXED_PRECISION": "bf16"}},
        ],
    )


def test_every_phase_passes(plain):
    passes_every_phase(plain)


def test_resume_is_bitwise_in_a_new_process(plain):
    d = plain.row("resume")["details"]
    assert [s["step"] for s in d["steps"]] == [3, 4]
    for s in d["steps"]:
        assert s["loss_same"] and s["grad_norm_same"] and s["learning_rate_same"] and s["digest_same"]
        assert s["loss_a"] == s["loss_c"] and s["loss_a"].startswith("0x")


def test_load_row_says_what_the_pilot_changed(plain):
    d = plain.row("load")["details"]
    changed = "\n".join(d["pilot_changed"])
    for key in ("output_dir", "logging_steps: 5 -> 1", "save_strategy: 'epoch' -> 'no'", "max_steps"):
        assert key in changed
    assert d["trainer"] == "CompletionTrainer" and d["collator"] == "PadCollator"
    assert d["capture_s"] > 0 and d["train_examples"] + d["eval_examples"] == 96
    # The load gate's time is the script's, up to train(): what a restart costs in the plan.
    assert plain.row("load")["duration_s"] == pytest.approx(d["capture_s"], abs=1e-3)
    # The trainer writes inside the record's folder, never where the script said (the script's
    # TrainingArguments may make the empty folder when it is constructed, before the capture).
    assert not any((plain.folder / "out").rglob("*"))
    assert "trainer-output" in d["pilot_changed"][0]


def test_inspect_shows_the_loop_batches_and_normaliser(plain):
    d = plain.row("inspect")["details"]
    (window,) = d["loader_windows"]
    assert window["microbatches"] == 2  # the script's gradient_accumulation_steps
    assert window["num_items_in_batch"] == window["scored_shifted"] > 0
    tokens = d["examples"][0]["tokens"]
    assert tokens[0]["role"] != "supervised"  # the shift never scores position 0
    assert {t["role"] for t in tokens} >= {"supervised", "ignored"}


def test_first_step_runs_their_loop_and_the_accumulation_check(plain):
    d = plain.row("first_step")["details"]
    assert d["accumulation"]["ok"] and d["accumulation"]["grad_rel_diff"] < 1e-4
    assert d["optimizer_state_mb"] > 0


def test_a_loss_averaged_per_microbatch_fails_first_step(tiny, tmp_path):
    run = run_in_process(tmp_path, "loss_per_microbatch.py", _args(tiny), phases={"skip": LATER})
    assert run.rc == 1, run.out
    row = run.row("first_step")
    assert row["verdict"] == "fail"
    assert "weighs microbatches, not tokens" in row["reason"]
    assert "the script's CompletionTrainer.compute_loss" in row["reason"]  # what to fix
    assert row["details"]["accumulation"]["grad_rel_diff"] > 0.1
    assert run.row("inspect")["verdict"] == "pass"


def test_a_collator_masking_the_eos_fails_inspect(tiny, tmp_path):
    run = run_in_process(
        tmp_path,
        "collator_masks_eos.py",
        _args(tiny),
        phases={"skip": LATER},
        # A broken twin of a fresh-capture variant: its args make the script exit before train().
        variants=[{"id": "badlen", "args": ["--max_length", "none"]}],
    )
    assert run.rc == 1, run.out
    row = run.row("inspect")
    assert row["verdict"] == "fail"
    check = next(c for c in row["details"]["checks"] if c["name"] == "end_supervised")
    assert check["verdict"] == "fail" and "never learns to stop" in check["message"]
    assert run.row("first_step")["verdict"] == "pass"
    # The variant fails its own rows, with the script's one line; nothing else of the campaign.
    assert {s for s, v in run.verdicts().items() if v != "pass"} == {"inspect", "first_step@badlen"}
    bad = run.row("first_step@badlen")
    assert bad["reason"].startswith("the fresh capture with the variant's args/env failed: ")
    assert "exited with status 2 before calling train()" in bad["reason"]
    assert "argument --max_length: invalid int value: 'none'" in bad["reason"] and "\n" not in bad["reason"]
    assert bad["details"]["fresh_capture"]["argv"][-2:] == ["--max_length", "none"]


def test_variants_change_the_trainer_args_in_place(plain):
    control, small = plain.row("first_step")["details"], plain.row("first_step@mb2")["details"]
    assert (control["train_batch_size"], control["gradient_accumulation_steps"]) == (4, 2)
    assert (small["train_batch_size"], small["gradient_accumulation_steps"]) == (2, 4)
    # Same examples per update, normalised by tokens: the same first update either way.
    assert small["loss"] == pytest.approx(control["loss"], rel=1e-5)
    assert small["grad_norm"] == pytest.approx(control["grad_norm"], rel=1e-4)
    assert plain.row("first_step@ckpt")["details"]["activation_checkpointing"] is True
    assert control["activation_checkpointing"] is False
    ids = [v["id"] for v in plain.record["variants"]]
    assert ids == ["control", "mb2", "ckpt", "bf16"]


def test_a_precision_variant_runs_in_a_fresh_capture(plain):
    control, rows = plain.row("first_step"), [plain.row(f"{p}@bf16") for p in VARIANT_PHASES]
    first = rows[0]
    fresh = first["details"]["fresh_capture"]
    assert fresh["variant_env"] == {"ACCELERATE_MIXED_PRECISION": "bf16"} and fresh["variant_args"] == []
    assert fresh["argv"] == plain.row("load")["details"]["argv"]
    assert (fresh["precision"], first["params"]["precision"], control["params"]["precision"]) == (
        "bf16",
        "bf16",
        "fp32",
    )
    assert 0 < fresh["capture_s"] < fresh["process_s"] and fresh["capture_rss_mb"] > 0
    # One process ran the variant's three phases; each row has that process's memory and time.
    assert len({r["details"]["fresh_capture"]["process_s"] for r in rows}) == 1
    assert all(0 < r["memory"]["peak_rss_mb"] <= fresh["process_peak_rss_mb"] + 1 for r in rows)
    assert plain.row("steady@bf16")["details"]["step_time_s"] > 0
    # bf16 autocast really ran: the same first update (same weights, rows, normaliser), other digits.
    loss, bf16_loss = control["details"]["loss"], first["details"]["loss"]
    assert bf16_loss != loss and bf16_loss == pytest.approx(loss, rel=0.05)
    entry = next(v for v in plain.record["variants"] if v["id"] == "bf16")
    assert entry["precision"] == "bf16" and entry["verdict"] == "pass" and entry["step_time_ratio"] > 0
    assert any(
        "a fresh capture of the script with env ACCELERATE_MIXED_PRECISION=bf16" in n for n in entry["notes"]
    )


def test_the_estimate_rebuilds_their_model_under_fake_tensors(plain):
    row = plain.row("estimate")
    assert row["verdict"] == "pass", row["reason"]
    names = [e["name"] for e in row["details"]["estimates"]]
    assert names == ["control", "mb2", "ckpt"]  # bf16 is another capture: known once it has run
    control = row["details"]["estimates"][0]
    # The captured model's own parameter count, and its longest rows as the sequence length.
    assert control["trainable_parameters"] == plain.row("load")["details"]["trainable_parameters"]
    assert control["max_length"] == plain.record["dataset"]["max_length"] > 0
    # The trainer's own optim (transformers' default) as the estimate's optimizer, said in the source;
    # its state is what the trainer's optimizer holds after its first step (2 float32 moments per
    # parameter, each tensor's rounded up to the allocator's 512-byte blocks in the estimate).
    assert control["optimizer"] == "adamw_fused"
    assert "optimizer adamw_torch_fused estimated as adamw_fused" in plain.record["estimate"]["source"]
    measured = plain.row("first_step")["details"]["optimizer_state_mb"]
    assert measured <= control["optimizer_state_mb"] <= measured * 1.1


def test_final_reloads_the_export_in_a_new_process(plain):
    exported, final = plain.row("export")["details"], plain.row("final")["details"]
    assert "config.json" in exported["files"] and not exported["adapter_only"]
    assert final["reloaded"] == "LlamaForCausalLM" and final["reload_process_s"] > 0
    assert final["logits_max_abs_diff"] <= 1e-5 and final["controls_changed"] == []
    assert [c["output"] for c in final["controls"]] == [c["output"] for c in exported["controls"]]


def test_steady_says_the_threads_cores_and_load_its_times_hold_at(plain):
    d = plain.row("steady")["details"]
    assert d["torch_threads"] >= 1 and d["cpu_count"] == os.cpu_count() and d["load_avg_1m"] >= 0
    caveats = "\n".join(plain.record["plan"]["caveats"])
    threads = d["torch_threads"]
    assert f"({threads} thread{'s' * (threads != 1)} on {os.cpu_count()} cores)" in caveats, caveats
