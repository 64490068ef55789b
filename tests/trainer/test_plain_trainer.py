"""A plain transformers `Trainer` script (argparse, its own `compute_loss` over
`num_items_in_batch`, its own collator) piloted unchanged; and its two broken twins."""

from __future__ import annotations

import math
import os
import time

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
        # The estimate included; steady timed as a user's campaign times it, to a (loose) precision.
        phases={"steady_updates": 3, "steady_precision": 0.5, "steady_min_s": 0.0, "steady_budget_s": 3.0},
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
    # Process C ran the script again up to its train(), in turn or started ahead beside untimed
    # steps (the estimate's wait for its fork, here): the row says so, with its time.
    again = d["resume_capture_s"]
    assert 0 < again < d["resume_process_s"]
    ahead = d["resume_process_ahead"]
    where = f" ahead, beside {ahead.split('beside ')[1].split(':')[0]}" if ahead else ""
    assert (
        f"in a new process (the script ran again up to its train() there{where}: {again:.1f} s)"
        in plain.row("resume")["reason"]
    )


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
    # Numerics A/B through the trainer's own compute_loss: its sdpa attention against eager.
    n = d["numerics"]
    assert n["within"] and n["attention"] == "sdpa" and n["precision"] == "fp32" and n["groups"] > 1
    assert n["loss_relative_difference"] < 1e-5 and n["worst_cosine"] > 0.9999


def test_a_loss_averaged_per_microbatch_fails_first_step(tiny, tmp_path):
    run = run_in_process(tmp_path, "loss_per_microbatch.py", _args(tiny), phases={"skip": LATER})
    assert run.rc == 1, run.out
    row = run.row("first_step")
    assert row["verdict"] == "fail"
    assert "weigh microbatches, not scored tokens" in row["reason"]
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
    # The phase that waited for the script to run again says so with its time; the later ones,
    # handed back by the same process, do not repeat it.
    again = f"the script ran again up to its train() in {fresh['capture_s']:.1f} s"
    assert again in first["reason"] and not any(again in r["reason"] for r in rows[1:])
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


def test_steady_times_the_trainers_loop_to_its_precision(plain):
    d = plain.row("steady")["details"]
    assert d["timed_updates"] == d["updates"] >= 3 and d["step_s_precision_target"] == 0.5
    if d["timing_stopped"] == "precision":
        assert 0 < d["step_s_precision"] <= 0.5
    elif d["timing_stopped"] == "max_steps":  # a loaded machine: the script's 11 updates ended it
        assert d["updates"] == d["max_steps"] - 1 and d["step_s_precision"] > 0.5
        assert any("the script's own run length" in n for n in d["notes"]), d["notes"]
    else:
        assert d["timing_stopped"] == "budget", d["timing_stopped"]
    assert d["step_s_mean"] == pytest.approx(d["step_time_s"]) and d["step_s_ci95"] > 0
    assert d["step_time_p10_s"] <= d["step_time_p50_s"] <= d["step_time_p90_s"]
    # The fixed reference workload, timed on both sides of train().
    assert len(d["speed_reference_s"]) == 2 and min(d["speed_reference_s"]) > 0
    assert 0 <= d["runqueue_share"] <= 1 and d["timing_clock"] == "host"
    # The plan's range is the interval, not the spread of single steps.
    (control,) = [o for o in plain.record["plan"]["package"]["order"] if o["id"] == "control"]
    span = control["interval"]
    assert span["step_mean_s"] == d["step_s_mean"] and span["step_precision"] == pytest.approx(
        d["step_s_precision"], abs=1e-5
    )
    assert f"at 95 % confidence over {d['timed_updates']} timed updates" in span["step_caveat"]


def test_steady_counts_the_tokens_of_its_timed_updates_for_the_mfu(plain):
    """The trainer's own loop, counted at its training_step: the timed updates' attended tokens,
    their rate, and the MFU figure from them (on a CPU: the model TFLOP/s, no peak)."""
    rows = {k: plain.row(k)["details"] for k in ("steady", "steady@mb2", "steady@ckpt")}
    d = rows["steady"]
    assert d["timed_tokens"] > 0
    assert d["tokens_per_s"] == pytest.approx(d["timed_tokens"] / (d["step_s_mean"] * d["timed_updates"]))
    # An update is the script's 4 × 2 rows, each a few to 64 attended tokens.
    assert 8 * 2 <= d["timed_tokens"] / d["timed_updates"] <= 8 * 64
    assert d["mfu"]["why"] == "a CPU: no dense peak to compare with" and d["mfu"]["model_tflops"] > 0
    # Each timed update is the script's 4 rows × 2 accumulation steps; the last may end the epoch
    # with fewer (a timing stopped at the script's run length).
    rows_timed = round(d["examples_per_s"] * d["step_s_mean"] * d["timed_updates"])
    assert 8 * (d["timed_updates"] - 1) < rows_timed <= 8 * d["timed_updates"], rows_timed
    # The same updates cut into other microbatches, or checkpointed: the same tokens.
    same = [k for k, v in rows.items() if v["timed_updates"] == d["timed_updates"]]
    assert {rows[k]["timed_tokens"] for k in same} == {d["timed_tokens"]}, {
        k: rows[k]["timed_tokens"] for k in same
    }


def test_the_plan_counts_the_scripts_own_run(plain):
    """The campaign file declares no batch: the plan plans the script's run (1 epoch of its rows
    at its batch), as the runner read it from the trainer's args, not the file's placeholders."""
    acc = plain.record["accounting"]
    assert acc["hold"] == "epochs" and acc["epochs"] == 1 and acc["updates"] == acc["updates_per_epoch"] > 1
    (control,) = [o for o in plain.record["plan"]["package"]["order"] if o["id"] == "control"]
    assert control["updates"] == acc["updates"] and control["epochs"] == 1.0
    assert plain.row("steady")["details"]["max_steps"] == acc["updates"]


def test_steady_runs_the_schedule_of_the_scripts_own_run(plain):
    """max_steps is the run's length, so the LR is the real run's first updates': the script's
    cosine schedule with 2 warm-up steps, over max_steps (not over the few updates timed)."""
    d = plain.row("steady")["details"]
    m, lrs = d["max_steps"], d["lrs"]
    assert m == plain.record["accounting"]["updates"] > 1 + 3 and len(lrs) == 1 + d["updates"] <= m
    # Two updates past the warm-up: lr · ½(1 + cos(π·k / (m − 2))) for k = 0 and 1.
    assert lrs[3] / lrs[2] == pytest.approx((1 + math.cos(math.pi / (m - 2))) / 2, rel=1e-6)


def test_the_open_says_what_the_runner_is_doing(tiny, tmp_path):
    """Before the first row a view waits seconds (imports, the script up to its `train()`): the
    runner says each stage, and the session hands it to the view while it waits."""
    from pilot_tui.core.events import Opening
    from pilot_tui.runner.in_process import InProcessLink
    from pilot_tui.session.driver import Session

    from .conftest import SCRIPT_ENV, write_campaign

    class Recording(InProcessLink):
        def __init__(self) -> None:
            super().__init__()
            self.stages: list[str] = []

        def receive(self, timeout: float):
            msg = super().receive(timeout)
            if isinstance(msg, Opening):
                self.stages.append(msg.stage)
            return msg

    path = write_campaign(tmp_path, "plain_trainer.py", _args(tiny))
    link = Recording()
    seen: list[str] = []
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.update(SCRIPT_ENV)
    session = Session(path, tmp_path / "records", link=link)
    session.on_open_wait = lambda waited: seen.append(session.opening_stage)
    try:
        os.chdir(tmp_path)
        began = time.perf_counter()
        session.start()
        waited = time.perf_counter() - began
    finally:
        session.close()
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    # The record keeps each stage's seconds: where the wait before the first verdict went.
    assert session.record is not None
    open_s = session.record.data["environment"]["open_s"]
    assert list(open_s) == link.stages and all(s >= 0 for s in open_s.values())
    assert sum(open_s.values()) <= waited
    assert open_s["running plain_trainer.py up to its trainer.train()"] > 0
    assert link.stages == [
        "importing torch",
        "importing transformers",
        "running plain_trainer.py up to its trainer.train()",
        "importing torch._dynamo (building an optimizer imports it)",
    ]
    assert set(seen) - {""} <= set(link.stages) and session.opening_stage == ""


def test_overfit_stops_once_the_subset_is_learnt_by_either_measure(plain):
    # The phase passes when the loss is below its target or the argmax recovers the subset: the
    # loop reads the recovery every few steps and stops at the first read that passes. Here the
    # argmax recovers every token (step 40) well before the loss reaches 0.05.
    from pilot_tui.runner.subject.trainer.data_gates import RECOVERY_EVERY

    row = plain.row("overfit")
    d = row["details"]
    assert row["verdict"] == "pass" and d["stopped"] == "recovered", d
    assert d["recovered"] >= d["recover"] and d["loss_last"] >= d["loss_below"]
    assert d["steps"] % RECOVERY_EVERY == 0
    assert f"learnt in {d['steps']} steps" in row["reason"]
