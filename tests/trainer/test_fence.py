"""No phase leaves the process's global state changed: seeds, flags, environment, working folder.

Every phase of a campaign of the pilot's own loop and of a captured Trainer script (with an LR
board whose seed is not the script's) runs between two snapshots taken by hooks in this module —
before the step's measurement starts, after its row — and the two must be equal. Without the
fence, the board's `set_seed(0)` reaches the next phase: the test shows that difference too.
"""

from __future__ import annotations

import io
import os
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from pilot_tui.runner.phases import base
from pilot_tui.runner.phases.fence import GlobalState

from .conftest import finished, run_in_process

pytestmark = pytest.mark.slow
BOARD = {"control": 0.002, "variants": [0.02], "seeds": [0], "updates": 2, "validate_every": 1}


def test_a_snapshot_puts_back_what_a_phase_may_change(tmp_path: Path) -> None:
    before = GlobalState.now()
    saved_cwd = os.getcwd()
    try:
        random.seed(1)
        np.random.seed(1)
        torch.manual_seed(1)
        torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
        torch.set_default_dtype(torch.float64)
        os.environ["PILOT_TUI_FENCE_TEST"] = "1"
        os.chdir(tmp_path)
        changed = before.differences(GlobalState.now())
        assert (
            "python RNG" in changed
            and "numpy RNG" in changed
            and "environment PILOT_TUI_FENCE_TEST" in changed
        )
        assert any(c.startswith("torch RNG") and c.endswith("-> 1)") for c in changed)
        assert any(c.startswith("default_dtype") for c in changed)
        assert before.restore() == []
        assert before.differences(GlobalState.now()) == []
    finally:
        os.chdir(saved_cwd)
        os.environ.pop("PILOT_TUI_FENCE_TEST", None)
        torch.set_default_dtype(torch.float32)


@pytest.fixture
def watched() -> Iterator[dict[str, list[str]]]:
    """Per step: what differs between the state before its measurement and after its row."""
    found: dict[str, list[str]] = {}
    taken: dict[str, GlobalState] = {}

    def before(ctx, step) -> None:
        taken[step.key] = GlobalState.now()

    def after(ctx, step, row) -> None:
        found[step.key] = taken.pop(step.key).differences(GlobalState.now())

    base.BEFORE_STEP.insert(0, before)
    base.AFTER_ROW.insert(0, after)
    yield found
    base.BEFORE_STEP.remove(before)
    base.AFTER_ROW.remove(after)


def test_every_phase_of_a_task_campaign_leaves_the_state_as_found(watched, write_campaign, tmp_path) -> None:
    from pilot_tui.commands.headless import run_headless
    from pilot_tui.runner.in_process import InProcessLink
    from pilot_tui.session.driver import Session

    path = write_campaign(
        {
            "lr_board": BOARD | {"control": 1e-4, "variants": [2e-4], "seeds": [3]},
            "overfit": {"max_steps": 20},
            "phases": {"skip": ["estimate", "machine"]},
        }
    )
    out = io.StringIO()
    rc = run_headless(Session(path, tmp_path / "records", link=InProcessLink()), out=out, err=out)
    run = finished(rc, out.getvalue(), "", tmp_path)
    assert len(watched) == len(run.record["phases"]) > 15, run.out
    assert {step: d for step, d in watched.items() if d} == {}


def test_every_phase_of_a_trainer_campaign_leaves_the_state_as_found(watched, tiny, tmp_path) -> None:
    run = run_in_process(
        tmp_path,
        "plain_trainer.py",
        ["--model", str(tiny.model), "--data", str(tiny.prompt_completion), "--output_dir", "out"],
        lr_board=BOARD,
        variants=[{"id": "mb2", "microbatch": 2}],
        fit_search={"microbatches": [2, 4]},
    )
    assert len(watched) == len(run.record["phases"]) > 15, run.out
    assert {step: d for step, d in watched.items() if d} == {}
    # The board ran with its own seed, and the resume after it with the script's: bitwise.
    assert run.row("resume")["verdict"] == "pass", run.out


def test_without_the_fence_the_boards_seed_reaches_the_next_phase(
    watched, tiny, tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(GlobalState, "restore", lambda self: [])
    run_in_process(
        tmp_path,
        "plain_trainer.py",
        ["--model", str(tiny.model), "--data", str(tiny.prompt_completion), "--output_dir", "out"],
        lr_board=BOARD | {"variants": []},
        phases={
            "skip": [
                "estimate",
                "machine",
                "inspect",
                "split",
                "overfit",
                "steady",
                "eval_longest",
                "save",
                "export",
                "resume",
                "final",
            ]
        },
    )
    leaked = watched["lr_run@lr2e-3-s0"]
    assert any(d.startswith("torch RNG (initial seed 42 -> 0)") for d in leaked), watched
