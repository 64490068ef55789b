"""The optimizer as a configuration dimension: one table of builders, AdamW unchanged, each
optimizer's state measured by a first step and counted by the fake-tensor estimate, checked by the
stack, and an Adafactor variant measured beside the control by the real runner (in-process)."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
import tomli_w
import torch

from pilot_tui.core import dimensions
from pilot_tui.core.dimensions import OPTIMIZERS, Dimension
from pilot_tui.core.spec import SpecError, load_spec
from pilot_tui.runner.context import RunContext
from pilot_tui.runner.in_process import InProcessLink
from pilot_tui.runner.loop import optimizers
from pilot_tui.runner.loop.residency import state_bytes
from pilot_tui.runner.loop.training import TrainConfig, lr_lambda, train_update
from pilot_tui.runner.memory.estimate.campaign import Target, fake_config
from pilot_tui.runner.memory.estimate.fake_run import run_fake
from pilot_tui.runner.memory.estimate.sources import task_source
from pilot_tui.runner.phases.stack import check_optimizers
from pilot_tui.session.driver import Session
from pilot_tui.tasks.loader import load_task
from tests.conftest import FAST, deep_merge, demo_raw

ADAFACTOR = {"id": "adafactor", "optim": {"name": "adafactor"}}


def context(folder: Path, changes: dict | None = None) -> RunContext:
    path = folder / "campaign.toml"
    path.write_text(tomli_w.dumps(deep_merge(deep_merge(demo_raw(), FAST), changes or {})))
    loaded = load_spec(path)
    return RunContext(loaded, load_task(loaded), torch.device("cpu"), emit=lambda _m: None, work_dir=folder)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> RunContext:
    return context(tmp_path_factory.mktemp("optimizers"))


def test_the_builders_are_the_spec_names_and_the_spec_refuses_others(write_campaign) -> None:
    assert set(optimizers.BUILDERS) == set(OPTIMIZERS)
    for changes, key in (
        ({"optim": {"name": "lion"}}, "optim.name: must be one of adamw, adamw_fused, sgd, adafactor"),
        ({"variants": [{"id": "x", "optimizer": "adam"}]}, "variants[0].optimizer: must be one of"),
        ({"variants": [{"id": "x", "optimizer": "adamw"}]}, "variant 'x' changes nothing from the control"),
        (
            {"variants": [{"id": "x", "optim": {"lr": 1e-3}}]},
            "variants[0].optim.lr: a memory variant keeps the control's lr",
        ),
        (
            {"variants": [{"id": "x", "optimizer": "sgd", "optim": {"name": "sgd"}}]},
            "variants[0].optim.name: sets optimizer a second time",
        ),
    ):
        with pytest.raises(SpecError) as caught:
            load_spec(write_campaign(changes))
        assert key in str(caught.value) and "\n" not in str(caught.value)
    # The twins: each spelling alone is a variant.
    for variant in ({"id": "x", "optimizer": "sgd"}, {"id": "x", "optim": {"name": "sgd"}}):
        assert load_spec(write_campaign({"variants": [variant]})).spec.variants[0].get("optimizer") == "sgd"


def test_adamw_from_the_table_trains_bitwise_as_torch_adamw_did(ctx: RunContext) -> None:
    """The default is the optimizer the runner always built: the same weights after three updates."""
    config = ctx.config()
    assert config.optimizer == "adamw"
    ours, theirs = ctx.new_state(config), ctx.new_state(config)
    o = ctx.spec.optim
    theirs.optimizer = torch.optim.AdamW(theirs.model.parameters(), lr=config.lr, weight_decay=o.weight_decay)
    theirs.scheduler = torch.optim.lr_scheduler.LambdaLR(
        theirs.optimizer, lr_lambda(o.warmup_updates, o.schedule, config.total_updates)
    )
    for _ in range(3):
        train_update(ours, ctx.task, ctx.device, o.grad_clip)
        train_update(theirs, ctx.task, ctx.device, o.grad_clip)
    for a, b in zip(ours.model.parameters(), theirs.model.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_the_estimate_counts_the_state_a_first_step_allocates(ctx: RunContext, name: str) -> None:
    """Exact bytes (no allocator rounding): the fake run's optimizer state is the real one's,
    less the scalar step counters a GPU keeps in host memory (a fused optimizer keeps them on it)."""
    config = ctx.config("control", {"optimizer": name})
    state = ctx.new_state(config)
    train_update(state, ctx.task, ctx.device, ctx.spec.optim.grad_clip)
    measured = state_bytes(state)["optimizer_state"]
    steps = [s["step"] for s in state.optimizer.state.values() if torch.is_tensor(s.get("step"))]
    on_host = 0 if name == "adamw_fused" else sum(t.untyped_storage().nbytes() for t in steps)
    cfg = replace(fake_config(ctx, "control", Target(), {"optimizer": name}), allocator_rounding=False)
    assert cfg.optimizer == name
    out = run_fake(task_source(ctx), cfg)
    assert out["estimable"], out
    assert out["optimizer_state_bytes"] == measured - on_host


def test_adafactor_keeps_a_small_fraction_of_adamw_state(ctx: RunContext) -> None:
    sizes = {}
    for name in ("adamw", "sgd", "adafactor"):
        state = ctx.new_state(ctx.config("control", {"optimizer": name}))
        train_update(state, ctx.task, ctx.device, ctx.spec.optim.grad_clip)
        sizes[name] = state_bytes(state)["optimizer_state"]
    weights = state_bytes(state)["weights"]
    # AdamW: two moments (2 × weights); SGD with momentum: one; Adafactor: factored rows and columns.
    assert sizes["adamw"] > 2 * weights > sizes["sgd"] >= weights > 10 * sizes["adafactor"]


def test_a_configuration_travels_to_a_fresh_process_whole(
    ctx: RunContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`params()` as JSON and back (the resume process): the optimizer and any table dimension."""
    config = ctx.config("control", {"optimizer": "adafactor"})
    assert TrainConfig.from_params(json.loads(json.dumps(config.params()))) == config
    extra = Dimension("schedule", "optim.schedule", str, ("constant", "linear", "cosine"))
    monkeypatch.setattr(dimensions, "DIMENSIONS", (*dimensions.DIMENSIONS, extra))
    config = ctx.config()
    assert config.value("schedule") == ctx.spec.optim.schedule and config.params()["schedule"]
    assert TrainConfig.from_params(json.loads(json.dumps(config.params()))) == config


def test_a_fused_kernel_the_device_lacks_falls_back_and_says_so() -> None:
    # The meta device has no fused AdamW kernel: a real device without one, not a stand-in.
    name, note = optimizers.runnable("adamw_fused", torch.device("meta"))
    assert name == "adamw" and "adamw_fused does not run on meta" in note and "runs as adamw" in note
    assert optimizers.runnable("adamw", torch.device("meta")) == ("adamw", "")


def test_the_stack_builds_and_steps_every_optimizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = context(tmp_path, {"optim": {"name": "adafactor"}, "variants": [{"id": "s", "optimizer": "sgd"}]})
    failures: list[str] = []
    warns: list[str] = []
    results = {r["optimizer"]: r for r in check_optimizers(ctx, failures, warns)}
    assert set(results) == set(OPTIMIZERS) and not failures and not warns
    assert results["adafactor"]["used_by"] == ["control"] and results["sgd"]["used_by"] == ["s"]
    assert all(r["ok"] for r in results.values())
    # A torch from before Adafactor (2.5): the control's optimizer does not exist there.
    monkeypatch.delattr(torch.optim, "Adafactor")
    check_optimizers(ctx, failures, warns)
    assert failures == [
        f"declared optimizer adafactor does not run here (torch {torch.__version__} has no torch.optim.Adafactor)"
    ]


def test_an_adafactor_variant_on_the_demo_holds_less_optimizer_state(write_campaign, tmp_path: Path) -> None:
    """The real runner, in-process: first_step's row and the estimate both see the smaller state."""
    keep = {"estimate", "first_step", "steady", "eval_longest"}
    from pilot_tui.core.phase_table import names

    path = write_campaign(
        {
            "variants": [ADAFACTOR],
            "phases": {"skip": [p for p in names() if p not in keep], "steady_updates": 2},
        }
    )
    session = Session(path, tmp_path / "records", link=InProcessLink())
    session.start()
    try:
        for step in session.steps:
            for _ in session.run_step(step.key):
                pass
    finally:
        session.close()
    assert session.record is not None
    record = tomllib.loads(session.record.path.read_text())
    rows = {r["step"]: r for r in record["phases"]}
    assert rows["first_step@adafactor"]["params"]["optimizer"] == "adafactor"
    measured = {
        v: rows[f"first_step{'' if v == 'control' else '@' + v}"]["details"]["optimizer_state_mb"]
        for v in ("control", "adafactor")
    }
    estimated = {c["name"]: c["optimizer_state_mb"] for c in record["estimate"]["configurations"]}
    assert 0 < measured["adafactor"] < measured["control"] / 10
    assert 0 < estimated["adafactor"] < estimated["control"] / 10
    entry = next(e for e in record["variants"] if e["id"] == "adafactor")
    assert entry["optimizer"] == "adafactor" and entry["changes_question"] is True
    assert "optimizer adamw -> adafactor" in entry["question_note"]
    assert (
        entry["optimizer_state_mb"]
        < next(e for e in record["variants"] if e["id"] == "control")["optimizer_state_mb"]
    )
