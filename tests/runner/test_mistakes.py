"""The mistakes people really make, each in its own task file written the way a user writes one
(tests/data/mistakes/: own model, data and collate), each with a correct twin of the same shape
that must still pass: a check that misfires on a correct task is a defect too.

Only the phases a check needs run, in this process, through the same `execute` the runner uses
(one row per phase, the verdict and reason as recorded). The headless heartbeat is about the
terminal: while a phase runs, through a runner process; while the task opens, with the runner on
a thread (`InProcessLink`), which opens the task the same way.
"""

from __future__ import annotations

import dataclasses
import gc
import io
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import torch

from pilot_tui.core.events import PhaseFinished
from pilot_tui.core.spec import load_spec
from pilot_tui.core.steps import Step
from pilot_tui.runner.context import RunContext
from pilot_tui.runner.phases.base import execute
from pilot_tui.session.driver import Session
from pilot_tui.tasks.loader import load_task

MISTAKES = Path(__file__).resolve().parent.parent / "data" / "mistakes"


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models: one torch thread (as the runner leaves a core to the view); spinning OpenMP
    threads on a shared 2-core machine make these steps many times slower. The objects the test
    process already holds (pytest, torch) are frozen out of the garbage collector, which every
    phase runs twice (`execute`): in a runner it walks a small heap, here a large one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    gc.freeze()
    yield
    gc.unfreeze()
    torch.set_num_threads(before)


def campaign(folder: Path, file: str, options: dict[str, Any] | None = None, **sections: Any) -> Path:
    raw: dict[str, Any] = {
        "campaign": {"name": file.replace("_", "-")},
        "task": {"file": str(MISTAKES / f"{file}.py"), "options": options or {}},
        "batch": {"microbatch": 4, "accumulation": 1, "device": "cpu", "hold": "updates", "updates": 40},
        # steady times at least 4 updates, then to its precision for at most a second.
        "phases": {"steady_updates": 4, "steady_budget_s": 1.0},
    }
    for name, values in sections.items():
        raw[name] = raw.get(name, {}) | values
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "campaign.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


def context(folder: Path, file: str, options: dict[str, Any] | None = None, **sections: Any) -> RunContext:
    loaded = load_spec(campaign(folder, file, options, **sections))
    return RunContext(loaded, load_task(loaded), torch.device("cpu"), lambda _m: None, folder / "work")


def run(ctx: RunContext, phase: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    return execute(ctx, Step.of(phase), overrides or {})


def pilot(tmp_path: Path, file: str, phase: str, options: dict[str, Any] | None = None, **sections: Any):
    ctx = context(tmp_path / f"{file}-{phase}-{sorted((options or {}).items())}", file, options, **sections)
    return run(ctx, phase)


def check(row: dict[str, Any], name: str) -> dict[str, Any]:
    found = {c["name"]: c for c in row["details"]["checks"]}
    assert name in found, (name, list(found))
    return found[name]


# ------------------------------------------------------------------------------------------ causal LM


def test_labels_shifted_twice_fail_and_the_aligned_twin_passes(tmp_path):
    bad = pilot(tmp_path, "lm_double_shift", "inspect", {"shift": True})
    c = check(bad, "label_alignment")
    assert bad["verdict"] == "fail" and c["verdict"] == "fail"
    assert "shifted a second time" in c["message"] and c["count"] == 48
    # Data terms: which example and which position; the example is shown with its flag.
    assert re.search(r"first at w\d+ position \d+", c["message"])
    assert any(f.startswith("label not aligned") for ex in bad["details"]["examples"] for f in ex["flags"])
    good = pilot(tmp_path, "lm_double_shift", "inspect", {"shift": False})
    assert good["verdict"] == "pass", good["reason"]
    assert check(good, "label_alignment")["verdict"] == "pass"


def test_a_prompt_mask_one_token_too_long_fails_at_the_boundary(tmp_path):
    bad = pilot(tmp_path, "lm_prompt_boundary", "inspect", {"off_by_one": True})
    c = check(bad, "response_boundary")
    assert c["verdict"] == "fail" and c["count"] == 40
    assert "first response token" in c["message"] and "prompt_length" in c["message"]
    good = pilot(tmp_path, "lm_prompt_boundary", "inspect", {"off_by_one": False})
    assert good["verdict"] == "pass", good["reason"]


def test_pads_the_mask_does_not_mark_are_caught_as_targets(tmp_path):
    bad = pilot(tmp_path, "lm_pad_targets", "inspect", {"label_pads": True})
    c = check(bad, "padding_supervised")
    assert c["verdict"] == "fail"
    # Rows padded by two or more positions: 16 starts x the two shorter lengths.
    assert c["count"] == 32 and "pad_id (0)" in c["message"]
    assert bad["details"]["pad_targets"] == 16 * (3 - 1) + 16 * (2 - 1)
    good = pilot(tmp_path, "lm_pad_targets", "inspect", {"label_pads": False})
    assert good["verdict"] == "pass", good["reason"]


def test_an_eos_id_equal_to_the_vocabulary_size_fails_inspect(tmp_path):
    bad = pilot(tmp_path, "lm_eos_out_of_vocab", "inspect", {"eos_is_vocab_size": True})
    c = check(bad, "label_range")
    assert c["verdict"] == "fail" and c["count"] == 36
    assert "outside [0, 29)" in c["message"] and "values [29]" in c["message"]
    assert bad["details"]["output_size"] == 29
    good = pilot(tmp_path, "lm_eos_out_of_vocab", "inspect", {"eos_is_vocab_size": False})
    assert good["verdict"] == "pass", good["reason"]


# ------------------------------------------------------------------------------------------ classification


def test_names_in_another_order_than_the_ids_fail_against_the_name_column(tmp_path):
    bad = pilot(tmp_path, "cls_names_order", "inspect", {"names_in_data_order": True})
    c = check(bad, "name_field")
    assert c["verdict"] == "fail" and c["count"] == 64
    assert (
        "'category'" in c["message"] and "the data says 0=apple, 1=banana, 2=cherry, 3=lemon" in c["message"]
    )
    good = pilot(tmp_path, "cls_names_order", "inspect", {"names_in_data_order": False})
    assert good["verdict"] == "pass", good["reason"]
    assert good["details"]["name_fields"] == ["category"]
    # The shown examples carry the field and say where it disagrees.
    assert all("name disagrees with category" in e["flags"] for e in bad["details"]["examples"])
    assert all(e["category"] == e["name"] and not e["flags"] for e in good["details"]["examples"])


def test_nothing_tying_ids_to_names_is_said_not_passed(tmp_path):
    bad = pilot(tmp_path, "cls_no_meaning", "inspect", {"keep_name_field": False})
    assert bad["verdict"] == "warn" and "mapping unverified" in bad["reason"]
    good = pilot(tmp_path, "cls_no_meaning", "inspect", {"keep_name_field": True})
    assert good["verdict"] == "pass", good["reason"]


def test_labels_collapsed_to_one_class_fail(tmp_path):
    bad = pilot(tmp_path, "cls_single_class", "inspect", {"wrong_column": True})
    c = check(bad, "single_class")
    assert (
        bad["verdict"] == "fail"
        and c["verdict"] == "fail"
        and "every one of the 40 labels is class 0" in c["message"]
    )
    good = pilot(tmp_path, "cls_single_class", "inspect", {"wrong_column": False})
    assert good["verdict"] == "pass", good["reason"]


def test_a_one_logit_head_without_a_bce_loss_is_refused_by_inspect(tmp_path):
    ctx = context(tmp_path / "no-loss", "cls_bce", {"one_logit": True})
    ctx.task = dataclasses.replace(ctx.task, loss=None)  # the BCE loss forgotten
    c = check(run(ctx, "inspect"), "label_range_model")
    assert c["verdict"] == "fail" and "one logit but the task has no loss" in c["message"]
    good = check(pilot(tmp_path, "cls_bce", "inspect", {"one_logit": True}), "label_range_model")
    assert good["verdict"] == "pass" and "one logit (a binary head" in good["message"]


@pytest.mark.parametrize("one_logit", [True, False])
def test_a_one_logit_binary_head_is_thresholded_in_overfit(tmp_path, one_logit):
    row = pilot(
        tmp_path,
        "cls_bce",
        "overfit",
        {"one_logit": one_logit},
        overfit={"examples": 16, "max_steps": 300, "lr": 0.1, "loss_below": 0.1},
    )
    d = row["details"]
    assert row["verdict"] == "pass", row["reason"]
    assert d["hits"] == d["targets"] == 16 and d["recovered"] == 1.0
    # Both classes are among the subset, so an argmax over one logit (always 0) could not pass.
    assert {p["expected"] for p in d["pairs"]} <= {"0 outside", "1 inside"}


# ------------------------------------------------------------------------------------------ leakage


def test_another_id_like_field_spanning_the_splits_warns_with_its_count(tmp_path):
    ctx = context(tmp_path / "visits", "split_patients", task={"group_key": "visit_id"})
    row = run(ctx, "split")
    c = check(row, "other_units")
    examples = ctx.task.examples
    where = {i: s for s, idx in ctx.splits.items() for i in idx}
    spanning = {
        p
        for p in {e["patient_id"] for e in examples}
        if len({where[i] for i, e in enumerate(examples) if e["patient_id"] == p}) > 1
    }
    assert spanning and row["verdict"] == "warn" and c["verdict"] == "warn"
    assert f"patient_id: {len(spanning)} values" in c["message"]
    good = run(context(tmp_path / "patients", "split_patients", task={"group_key": "patient_id"}), "split")
    assert good["verdict"] == "pass", good["reason"]


def _crossing(ctx: RunContext) -> int:
    """Copies of a ticket that the split put in another split than the original."""
    where = {i: s for s, idx in ctx.splits.items() for i in idx}
    index = {e["id"]: i for i, e in enumerate(ctx.task.examples)}
    return sum(
        1
        for i, e in enumerate(ctx.task.examples)
        if e["id"].endswith("-refiled") and where[i] != where[index[e["id"].removesuffix("-refiled")]]
    )


def test_the_same_input_under_another_date_or_label_is_flagged_across_splits(tmp_path):
    relabelled = context(tmp_path / "relabelled", "split_near_duplicates", {"duplicates": "relabelled"})
    row = run(relabelled, "split")
    c = check(row, "same_input")
    assert _crossing(relabelled) > 0
    assert check(row, "duplicates")["verdict"] == "pass"  # the fields differ: the old hash saw nothing
    assert (
        c["verdict"] == "fail"
        and c["count"] == _crossing(relabelled)
        and "conflicting labels" in c["message"]
    )
    refiled = context(tmp_path / "refiled", "split_near_duplicates", {"duplicates": "refiled"})
    row = run(refiled, "split")
    c = check(row, "same_input")
    assert c["verdict"] == "warn" and c["count"] == _crossing(refiled) and row["verdict"] == "warn"
    good = run(context(tmp_path / "unique", "split_near_duplicates", {"duplicates": ""}), "split")
    assert good["verdict"] == "pass", good["reason"]


def test_months_without_zero_padding_are_ordered_as_dates(tmp_path):
    ctxs = {
        padded: context(
            tmp_path / f"p{padded}", "split_months", {"padded": padded}, task={"group_kind": "time"}
        )
        for padded in (True, False)
    }
    ids = {
        p: {s: [c.task.examples[i]["id"] for i in idx] for s, idx in c.splits.items()}
        for p, c in ctxs.items()
    }
    assert ids[True] == ids[False]  # the same split, whichever way months are written
    row = run(ctxs[False], "split")
    assert row["verdict"] == "pass", row["reason"]
    order = row["details"]["time_order"]
    ctx = ctxs[False]

    def months(split: str) -> list[str]:
        return [ctx.task.examples[i]["month"] for i in ctx.splits[split]]

    def as_date(period: str) -> tuple[int, ...]:
        return tuple(int(x) for x in period.split("-"))

    assert order["train_last"] == max(months("train"), key=as_date)
    assert order["validation_first"] == min(months("validation"), key=as_date)
    assert as_date(order["train_last"]) < as_date(order["validation_first"])
    # Read as text, 2023-10 would sort before 2023-2: the padded and unpadded splits (equal
    # above) could not both hold; every month of train comes before every month of validation.
    assert max(map(as_date, months("train"))) < min(map(as_date, months("validation")))
    assert sorted(set(months("train"))) != sorted(set(months("train")), key=as_date)


def test_periods_that_cannot_be_ordered_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"'[a-z]+' holds no number or date"):
        context(tmp_path / "seasons", "split_months", {"seasons": True}, task={"group_kind": "time"})


# ------------------------------------------------------------------------------------------ the model


@pytest.mark.parametrize("mistake, modules", [("unused_head", ["aux_head"]), ("detached", ["encoder"])])
def test_parameters_without_gradient_warn_at_the_first_step(tmp_path, mistake, modules):
    ctx = context(tmp_path / mistake, "model_dead_params", {"mistake": mistake})
    row = run(ctx, "first_step")
    d = row["details"]
    model = ctx.states["control"].model
    dead = sum(p.numel() for name, p in model.named_parameters() if name.split(".")[0] in modules)
    total = sum(p.numel() for p in model.parameters())
    assert row["verdict"] == "warn", row["reason"]
    assert [m["module"] for m in d["gradless_modules"]] == modules
    assert d["gradless_parameters"] == dead and d["gradless_share_pct"] == round(100 * dead / total, 2)
    assert f"{round(100 * dead / total, 2):g}% of trainable parameters" in row["reason"]
    good = run(context(tmp_path / "used", "model_dead_params", {"mistake": ""}), "first_step")
    assert good["verdict"] == "pass" and good["details"]["gradless_parameters"] == 0


def test_a_model_that_turns_nan_is_said_so_in_every_later_phase(tmp_path):
    ctx = context(
        tmp_path / "nan",
        "model_nan",
        {"nan_every": 19},
        phases={"steady_updates": 8, "steady_precision": 0.0},  # exactly 8: the reason counts them
        resume={"k": 4, "n": 5},
    )
    assert run(ctx, "first_step")["verdict"] == "pass"
    steady = run(ctx, "steady")
    m = re.search(
        r"non-finite loss at update (\d+) of the campaign \(timed steady update (\d+) of 8\)",
        steady["reason"],
    )
    # first_step took update 1 and steady an untimed warm-up (update 2): timed update k is k + 2.
    assert m and int(m[1]) == int(m[2]) + 2, steady["reason"]
    for phase in ("save", "export"):
        row = run(ctx, phase)
        assert row["verdict"] == "fail"
        assert row["reason"].startswith("the model's weights are not finite"), row["reason"]
        assert f"turned non-finite at update {m[1]}, in steady" in row["reason"]
    final = run(ctx, "final")
    assert final["reason"].startswith(
        "no exported artifact: the export failed — the model's weights are not finite"
    )
    resume = run(ctx, "resume")
    assert "is not finite (its loss is non-finite from update" in resume["reason"], resume["reason"]
    assert "differ" not in resume["reason"] + final["reason"]
    twin = context(
        tmp_path / "finite",
        "model_nan",
        {"nan_every": 0},
        phases={"steady_updates": 8, "steady_precision": 0.0},
    )
    for phase in ("first_step", "steady", "save", "export"):
        row = run(twin, phase)
        assert row["verdict"] in ("pass", "warn") and "finite" not in row["reason"], (phase, row["reason"])


def test_headless_shows_the_phase_and_a_heartbeat_while_build_model_is_slow(tmp_path):
    from pilot_tui.commands.headless import Heartbeat, ProgressBar, run_headless
    from pilot_tui.core import phase_table
    from pilot_tui.core.events import Counters, PhaseFinished, PhaseStarted
    from pilot_tui.session.driver import Session

    path = campaign(tmp_path, "slow_build", {"sleep_s": 1.5})
    raw = tomllib.loads(path.read_text())
    raw["phases"]["skip"] = [name for name in phase_table.names() if name != "load"]  # load builds the model
    path.write_text(tomli_w.dumps(raw))
    out = io.StringIO()
    run_headless(Session(path, tmp_path / "records"), out=out, err=io.StringIO(), heartbeat_s=0.6)
    beats = re.findall(r"… load still running \((\d+) s\)", out.getvalue())
    assert beats and all(int(s) <= 2 for s in beats), out.getvalue()
    # The twin: a phase that ends before the period says nothing more than its row.
    quiet = io.StringIO()
    beat = Heartbeat(quiet, ProgressBar(io.StringIO()), 1.0)
    for ev in (
        PhaseStarted(step="load", phase="load", variant="control"),
        Counters(time=0.0, device="cpu", values={}),
    ):
        beat.see(ev)
    beat.see(PhaseFinished(step="load", row={}))
    assert quiet.getvalue() == ""


def test_headless_shows_a_heartbeat_while_the_task_opens_and_nothing_when_it_is_quick(tmp_path):
    from pilot_tui.commands.headless import run_headless
    from pilot_tui.core import phase_table
    from pilot_tui.runner.in_process import InProcessLink
    from pilot_tui.session.driver import Session

    def opened(folder: Path, open_s: float, period: float = 0.6) -> str:
        path = campaign(folder, "slow_build", {"open_s": open_s})
        raw = tomllib.loads(path.read_text())
        raw["phases"]["skip"] = [name for name in phase_table.names() if name != "split"]
        path.write_text(tomli_w.dumps(raw))
        out = io.StringIO()
        run_headless(
            Session(path, folder / "records", link=InProcessLink()),
            out=out,
            err=io.StringIO(),
            heartbeat_s=period,
        )
        return out.getvalue()

    slow = opened(tmp_path / "slow", 2.0)
    # Each beat says what the runner said it was doing then, and for how long the open has taken.
    beats = re.findall(r"… opening the campaign: (.+) \((\d+) s\)", slow)
    seconds = [int(s) for _, s in beats]
    assert len(beats) >= 2 and seconds == sorted(seconds) and seconds[-1] >= 2, slow
    assert re.fullmatch(r"building the task \S*slow_build\.py \(its examples\)", beats[0][0]), slow
    assert slow.index("opening the campaign") < slow.index("pilot-tui · campaign")  # before the header
    # The twin: an open shorter than the period (15 s when not on a terminal) prints no beat.
    quick = opened(tmp_path / "quick", 0.0, period=15.0)
    assert "opening the campaign" not in quick and "split" in quick


def test_tensors_compare_bitwise_where_finite_and_name_a_nan_that_moved():
    from pilot_tui.runner.checks.finiteness import finite_equal, non_finite
    from pilot_tui.runner.loop.resume_check import compare

    nan, inf = float("nan"), float("inf")
    a = torch.tensor([1.0, nan, inf, 2.0])
    assert finite_equal(a, a.clone()) and not torch.equal(a, a.clone())  # NaN never equals NaN
    assert not finite_equal(a, torch.tensor([1.0, nan, inf, 2.5]))
    assert not finite_equal(a, torch.tensor([nan, 1.0, inf, 2.0]))  # the NaN moved
    assert non_finite({"w": a, "b": torch.ones(2)}) == [("w", 2)]
    steps = [{"step": 1, "lr": 1e-3, "batch": [0], "loss": 1.0, "epoch": 0}]
    draws = {"draw/torch": torch.zeros(4)}
    same = compare(steps, steps, {"model/w": a} | draws, {"model/w": a.clone()} | draws, 0.5, 0.5, 0.0)
    assert same.ok
    moved = compare(steps, steps, {"model/w": a} | draws, {"model/w": a.flip(0)} | draws, 0.5, 0.5, 0.0)
    assert not moved.ok and "max |Δ| 0 " not in moved.reason() and "w differs" in moved.reason()


# ------------------------------------------------------------------------------------------ the objective


@pytest.mark.parametrize("microbatch, accumulation", [(4, 2), (1, 4)])
def test_a_loss_averaged_per_microbatch_fails_the_accumulation_check(tmp_path, microbatch, accumulation):
    sections = {"batch": {"microbatch": microbatch, "accumulation": accumulation}}
    bad = pilot(tmp_path, "lm_own_loss", "first_step", {"loss": "mean"}, **sections)
    c = bad["details"]["accumulation_check"]
    assert bad["verdict"] == "fail" and c["ran"] and not c["ok"] and c["lengths_vary"]
    # Both numbers in the reason, read from the two groupings the row keeps.
    assert f"{c['loss_wide']:.6g} vs {c['loss_narrow']:.6g}" in bad["reason"]
    assert "normalised per microbatch" in bad["reason"]
    wide_m = microbatch if microbatch > 1 else 2
    assert c["wide"] == [wide_m, microbatch * accumulation // wide_m] and c["narrow"] == [
        1,
        microbatch * accumulation,
    ]
    good = pilot(tmp_path, "lm_own_loss", "first_step", {"loss": "sum"}, **sections)
    g = good["details"]["accumulation_check"]
    assert good["verdict"] == "pass", good["reason"]
    assert g["ok"] and g["lengths_vary"] and g["loss_rel_diff"] <= g["tolerance"]
    assert good["details"]["reference_loss"]["ok"], good["details"]["reference_loss"]


def test_the_first_update_is_the_same_whether_the_checks_ran_or_not(tmp_path):
    """The checks run from the state before the first update and leave it and the RNG as found:
    the update's loss and weights equal those of a plain `train_update` from the same seed."""
    from pilot_tui.runner.loop.training import train_update

    ctx = context(tmp_path / "with", "lm_own_loss", {"loss": "sum"})
    row = run(ctx, "first_step")
    plain = context(tmp_path / "plain", "lm_own_loss", {"loss": "sum"})
    state = plain.state("control", plain.config("control"))
    stats = train_update(state, plain.task, plain.device, plain.spec.optim.grad_clip)
    assert row["details"]["loss"] == float(stats.loss)
    after = dict(ctx.states["control"].model.named_parameters())
    for name, p in state.model.named_parameters():
        assert torch.equal(p, after[name]), name


@pytest.mark.parametrize("mistake", ["mean", "smoothing_over_ignored", "unshifted"])
def test_a_task_loss_that_is_not_the_masked_cross_entropy_warns_with_both_values(tmp_path, mistake):
    # Accumulation 1, microbatch 4: a per-microbatch mean and a term over padded positions still
    # fail the regrouping (the reference loss is then read from the details); a loss scored
    # without the shift does not depend on the grouping and only warns.
    row = pilot(tmp_path, "lm_own_loss", "first_step", {"loss": mistake})
    r = row["details"]["reference_loss"]
    assert r["ran"] and not r["ok"]
    assert f"{r['own']:.6g} per supervised target" in r["message"]
    assert f"gives {r['reference']:.6g} (ratio {r['ratio']:.4g}" in r["message"]
    if mistake == "mean":
        assert r["ratio"] == pytest.approx(1 / r["targets"], rel=1e-4)
    if mistake == "unshifted":
        assert row["verdict"] == "warn" and r["message"] in row["reason"]
        assert row["details"]["accumulation_check"]["ok"]
    else:
        assert row["verdict"] == "fail" and not row["details"]["accumulation_check"]["ok"]


def test_a_bos_written_twice_warns_and_a_doubled_first_letter_does_not(tmp_path):
    bad = pilot(tmp_path, "lm_double_bos", "inspect", {"bos_twice": True})
    c = check(bad, "bos_tokens")
    assert bad["verdict"] == "warn" and c["verdict"] == "warn", bad["reason"]
    assert c["count"] == 40 and "start with '<s>' (id 1) twice" in c["message"]
    good = pilot(tmp_path, "lm_double_bos", "inspect", {"bos_twice": False})
    assert good["verdict"] == "pass", good["reason"]
    assert check(good, "bos_tokens")["verdict"] == "pass"


# ------------------------------------------------------------------------------------------ serving


def _served(tmp_path: Path, options: dict[str, Any]) -> dict[str, Any]:
    ctx = context(
        tmp_path / f"served-{sorted(options.items())}",
        "lm_serving",
        options,
        replay={"inputs": ["ab", "abcdef", "cab", "hgfedc"]},
    )
    assert run(ctx, "export")["verdict"] == "pass"
    return run(ctx, "final")


def test_positions_not_read_from_the_mask_make_batched_replies_differ(tmp_path):
    bad = _served(tmp_path, {"positions": "absolute"})
    s = bad["details"]["serving"]
    assert bad["verdict"] == "warn" and s["ran"] and s["differing"], bad["reason"]
    # The bitwise reload comparison still holds: the difference is batching, not the artifact.
    assert all(c["same"] for c in bad["details"]["replays"])
    i = s["differing"][0]
    assert f"{s['single'][i]} alone vs {s['batched'][i]} in a batch" in bad["reason"]
    good = _served(tmp_path, {"positions": "mask"})
    assert good["verdict"] == "pass", good["reason"]
    g = good["details"]["serving"]
    assert g["ok"] and g["single"] == g["batched"] and not g["unstopped"]
    assert all(r[-1] == 4 and len(r) <= 12 for r in g["single"])  # each ends at <eot>


def test_a_stop_token_the_model_never_ends_with_warns_that_replies_run_on(tmp_path):
    bad = _served(tmp_path, {"stop": "eos"})
    s = bad["details"]["serving"]
    assert bad["verdict"] == "warn" and len(s["unstopped"]) == 4
    assert (
        "4 of 4 replies did not stop within max_new_tokens 12 at an end token (stop_ids [3])" in bad["reason"]
    )
    assert all(len(r) == 12 for r in s["single"])


# ------------------------------------------------------------------------------------------ resume edges


def _resume(tmp_path: Path, augment: bool, workers: int, overrides: dict[str, Any] | None = None):
    ctx = context(
        tmp_path / f"resume-{augment}-{workers}-{sorted((overrides or {}).items())}",
        "resume_random_collate",
        {"augment": augment},
        batch={"num_workers": workers},
        resume={"k": 3, "n": 2},
    )
    return run(ctx, "resume", overrides)


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """`_resume` once per configuration in this module: one test's twin is another's subject (a
    resume check starts a new process, and loader workers)."""
    rows: dict[str, dict[str, Any]] = {}

    def get(augment: bool, workers: int, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        key = (augment, workers, sorted((overrides or {}).items()))
        if repr(key) not in rows:
            rows[repr(key)] = _resume(tmp_path_factory.mktemp("resume"), augment, workers, overrides)
        return rows[repr(key)]

    return get


@pytest.mark.slow
def test_random_draws_in_loader_workers_break_a_mid_epoch_resume_by_name(resumed):
    bad = resumed(augment=True, workers=2)
    assert bad["verdict"] == "fail", bad["reason"]
    assert bad["reason"].startswith("resume breaks at the loader workers: the batch fed at update 4")
    (edge,) = [e for e in bad["details"]["edges"] if not e["ok"]]
    assert edge["case"] == "workers" and edge["data_differs"] and edge["k"] == 3
    # The twins: the same collate in the main process, and workers with nothing random in them.
    for augment, workers in ((True, 0), (False, 2)):
        good = resumed(augment, workers)
        assert good["verdict"] == "pass", (augment, workers, good["reason"])
        assert all(e["ok"] for e in good["details"]["edges"])


def test_a_resume_at_the_end_of_an_epoch_that_skips_the_next_is_named(resumed):
    good = resumed(augment=True, workers=0)
    (edge,) = [e for e in good["details"]["edges"] if e["case"] == "epoch_boundary"]
    assert good["verdict"] == "pass" and edge["ok"] and edge["at_epoch_boundary"], good["reason"]
    assert edge["k"] == good["details"]["updates_per_epoch"]
    assert not any("epoch boundary is not covered" in n for n in good["details"]["notes"])
    bad = resumed(augment=True, workers=0, overrides={"break_resume": "epoch"})
    assert bad["verdict"] == "fail"
    assert bad["reason"].startswith(
        f"resume breaks at the epoch boundary: the batch fed at update {edge['k'] + 1}"
    )


def test_use_cache_false_left_in_the_config_warns_at_export(tmp_path):
    pytest.importorskip("transformers")
    bad = pilot(tmp_path, "hf_use_cache", "export", {"use_cache_off": True})
    assert bad["verdict"] == "warn" and bad["reason"].startswith("config use_cache = false"), bad["reason"]
    assert bad["details"]["serving_config"] == [bad["reason"]]
    good = pilot(tmp_path, "hf_use_cache", "export", {"use_cache_off": False})
    assert good["verdict"] == "pass" and good["details"]["serving_config"] == [], good["reason"]


def test_a_resume_mismatch_is_named_by_its_edge():
    """`classify` as another loop (a trainer adapter) calls it with its own figures."""
    from pilot_tui.runner.loop.resume_edges import EPOCH_BOUNDARY, FIRST_WINDOW, WORKERS, classify

    # Resumed at update 6 of epochs of 10 updates: only update 7 differs, later ones agree.
    assert classify(7, 6, 10, 0, data_differs=True, later_match=True) == FIRST_WINDOW
    assert classify(7, 6, 10, 0, data_differs=False, later_match=False) == "update 7"
    assert classify(11, 10, 10, 0, data_differs=True, later_match=False) == EPOCH_BOUNDARY
    assert classify(7, 6, 10, 2, data_differs=True, later_match=True) == WORKERS
    # A difference later than the first window is no edge: the update is named.
    assert classify(9, 6, 10, 0, data_differs=False, later_match=True) == "update 9"


def test_a_dataset_too_small_for_its_splits_fails_with_the_size_of_each(tmp_path):
    ctx = context(tmp_path / "tiny", "split_too_small", {"rows": 12})
    row = run(ctx, "split")
    c = check(row, "sizes")
    sizes = {name: len(ctx.splits[name]) for name in ("train", "validation", "test")}
    assert sizes["validation"] == 1 and row["verdict"] == "fail" and c["verdict"] == "fail"
    assert f"(train {sizes['train']}, validation 1, test {sizes['test']} examples)" in c["message"]
    good = run(context(tmp_path / "enough", "split_too_small", {"rows": 40}), "split")
    assert good["verdict"] == "pass", good["reason"]


def test_replies_that_run_on_are_blamed_on_the_stop_ids_only_where_the_data_says_so():
    """A cause is named only where it was measured: replies that run on while every training
    reply ends with a stop id are a briefly trained model's, noted; replies taught to end on
    another token are the stop ids' fault, warned."""
    from pilot_tui.runner.loop.serving_check import generation_warnings

    def found() -> dict[str, Any]:
        return {"ran": True, "differing": [], "unstopped": ["ab"], "max_new_tokens": 12, "stop_ids": [4]}

    ran_on = found()
    assert generation_warnings(ran_on, ["ab"], (40, 40)) == []
    assert "every one of 40 training replies ends with a stop id" in ran_on["note"]
    (warned,) = generation_warnings(found(), ["ab"], (0, 40))
    assert "40 of 40 training replies end with another token than the stop ids" in warned


def test_a_custom_attention_kernel_with_wrong_gradients_fails_first_step_and_its_twin_passes(tmp_path):
    """Numerics A/B: the run's own attention kernel against eager attention on the same weights."""
    pytest.importorskip("transformers")
    bad = pilot(tmp_path, "hf_custom_attention", "first_step", {"kernel": "wrong"})
    assert bad["verdict"] == "fail", bad["reason"]
    assert "the attention implementation 'user_attention' (against 'eager')" in bad["reason"], bad["reason"]
    # The mask it ignores also makes a padded microbatch differ from an unpadded one: the kernel is
    # named first, not the loss normalisation.
    assert bad["reason"].startswith("one batch through the run's configuration"), bad["reason"]
    found = bad["details"]["numerics"]
    assert not found["within"] and found["worst_cosine"] < 0.99
    good = pilot(tmp_path, "hf_custom_attention", "first_step", {"kernel": "right"})
    assert good["verdict"] == "pass", good["reason"]
    numerics = good["details"]["numerics"]
    assert numerics["within"] and numerics["attention"] == "user_attention"
    assert numerics["loss_relative_difference"] < 1e-5 and numerics["worst_cosine"] > 0.9999


def test_packed_documents_that_see_each_other_warn_and_the_isolated_twin_passes(tmp_path):
    """A hand-rolled packing collator: all-ones mask and running positions, against position restarts."""
    pytest.importorskip("transformers")
    bad = pilot(tmp_path, "lm_packing", "first_step", {"isolate": False})
    packing = bad["details"]["packing"]
    assert bad["verdict"] == "warn" and "packed documents see each other" in bad["reason"], bad["reason"]
    assert packing["compared"] >= 1 and packing["worst_token_loss_gap"] > 1e-3 and packing["prompted_data"]
    good = pilot(tmp_path, "lm_packing", "first_step", {"isolate": True})
    assert good["verdict"] == "pass", good["reason"]
    assert (
        good["details"]["packing"]["isolated"] and good["details"]["packing"]["worst_token_loss_gap"] < 1e-4
    )


def test_loader_workers_that_leak_name_the_hour_host_memory_runs_out_and_the_clean_twin_does_not(tmp_path):
    """The long run, projected from steady: host RSS of the trainer and its workers per update."""
    from pilot_tui.analysis.plan.caveats import host_memory_runs_out
    from pilot_tui.core.rows import PhaseRow

    def steady_of(leak_mb: int) -> PhaseRow:
        # In a runner process of its own, as a user's campaign runs: this test process carries the
        # heap of every test before it, and the allocator handing some back to the system while
        # the loop runs would hide the workers' growth in the sum.
        path = campaign(
            tmp_path / f"leak{leak_mb}",
            "loader_leak",
            {"leak_mb": leak_mb},
            batch={"num_workers": 1, "updates": 1_000_000},
            phases={"steady_updates": 40, "steady_budget_s": 1.0, "steady_min_s": 0.5},
        )
        session = Session(path, records_dir=tmp_path / f"leak{leak_mb}" / "records")
        session.start()
        try:
            (row,) = [e.row for e in session.run_step("steady") if isinstance(e, PhaseFinished)]
        finally:
            session.close()
        assert row["verdict"] != "fail", row["reason"]
        return PhaseRow.from_toml(row)

    leaky = steady_of(1)
    rss = leaky.details["host_rss"]
    assert rss["processes"] >= 2 and rss["slope_mb_per_update"] > 0.5, rss
    said = host_memory_runs_out(leaky, run_hours=1_000.0)
    assert said.startswith("host memory: the trainer and its 1 loader worker(s) grew"), said
    assert "is full after ~" in said and "before the run's 1000.0 h end" in said
    clean = steady_of(0)
    assert clean.details["host_rss"]["slope_mb_per_update"] < 0.5
    assert host_memory_runs_out(clean, run_hours=1_000.0) == ""
