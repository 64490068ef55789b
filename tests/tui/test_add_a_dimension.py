"""docs/architecture.md's worked example, proved: a configuration dimension is one table entry.

The dimension here — the LR schedule as a variant may change it — is added to the table from
this test module and nowhere in the package. It is still accepted (and checked) in `[[variants]]`,
reaches the rows' params in the real runner code (on a thread: a separate process could not
see the patched table), the `[[variants]]` comparison entry (as a change of question), the
fake-tensor estimate's configurations, the Board's variants table and the variant form.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from pilot_tui.core import dimensions, phase_table
from pilot_tui.core.dimensions import Dimension
from pilot_tui.core.spec import SCHEDULES, SpecError, load_spec
from pilot_tui.runner.in_process import InProcessLink
from pilot_tui.session.driver import Session
from pilot_tui.tui.app import PilotApp
from pilot_tui.tui.nvml import NvmlProbe
from pilot_tui.tui.screens import VariantForm

from .fake_nvml import NoDriverNvml
from .test_readable import screen_text
from .waiting import wait_for

KEPT = ("estimate", "first_step", "steady", "eval_longest")


@pytest.fixture
def schedule_dimension(monkeypatch: pytest.MonkeyPatch) -> Dimension:
    """One entry: the control's value is `optim.schedule`, a variant's `schedule`."""
    d = Dimension(
        "schedule",
        "optim.schedule",
        str,
        SCHEDULES,
        column="sched",
        form="select",
        question="changed",  # another schedule makes other updates
    )
    monkeypatch.setattr(dimensions, "DIMENSIONS", (*dimensions.DIMENSIONS, d))
    return d


def test_the_spec_checks_a_new_dimension_like_the_others(schedule_dimension, write_campaign) -> None:
    # The demo's control is cosine: linear changes something, and is accepted.
    loaded = load_spec(write_campaign({"variants": [{"id": "lin", "schedule": "linear"}]}))
    assert loaded.spec.variants[0].get("schedule") == "linear"
    mistakes = {
        "exponential": "variants[0].schedule: must be one of constant, linear, cosine, got 'exponential'",
        "cosine": "variant 'lin' changes nothing from the control",
    }
    for value, message in mistakes.items():
        with pytest.raises(SpecError, match=re.escape(message)):
            load_spec(write_campaign({"variants": [{"id": "lin", "schedule": value}]}))
    with pytest.raises(
        SpecError, match=re.escape("variants[0].shedule: unknown key (did you mean 'schedule'")
    ):
        load_spec(write_campaign({"variants": [{"id": "lin", "shedule": "linear"}]}))


def test_without_the_entry_a_variant_cannot_set_it(write_campaign) -> None:
    with pytest.raises(SpecError, match=re.escape("variants[0].schedule: unknown key")):
        load_spec(write_campaign({"variants": [{"id": "lin", "schedule": "linear"}]}))


async def test_a_dimension_defined_here_reaches_params_comparison_estimate_board_and_form(
    schedule_dimension, write_campaign, tmp_path: Path
) -> None:
    skip = [p for p in phase_table.names() if p not in KEPT]
    path = write_campaign(
        {"variants": [{"id": "lin", "schedule": "linear"}], "phases": {"skip": skip, "steady_updates": 2}}
    )
    session = Session(path, tmp_path / "records", link=InProcessLink())
    app = PilotApp(source=session, nvml=NvmlProbe(NoDriverNvml()))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the runner to start")
        await pilot.press("a")
        await wait_for(pilot, lambda: all(g.finished for g in app.gates.values()), "every step")
        await pilot.press("e")
        await wait_for(pilot, lambda: "plan" in app.sections, "the record")
        await pilot.press("4")
        await wait_for(pilot, lambda: "memory variants vs control" in screen_text(app), "the variants table")
        board = screen_text(app)
        # The variant form has a field for it, filled from the selected row's params.
        await pilot.press("1", "ctrl+home")
        await pilot.press("v")
        await wait_for(pilot, lambda: isinstance(app.screen, VariantForm), "the variant form")
        assert app.screen.query_one("#schedule").value == "cosine"
        await pilot.press("escape")
    record = tomllib.loads(Path(app.record_path).read_text())
    rows = {row["step"]: row for row in record["phases"]}
    assert rows["first_step"]["params"]["schedule"] == "cosine"
    assert rows["first_step@lin"]["params"]["schedule"] == "linear"
    entries = {e["id"]: e for e in record["variants"]}
    assert (entries["control"]["schedule"], entries["lin"]["schedule"]) == ("cosine", "linear")
    assert entries["lin"]["changes_question"] is True
    assert "schedule cosine -> linear" in entries["lin"]["question_note"]
    estimated = {c["name"]: c for c in record["estimate"]["configurations"]}
    assert (estimated["control"]["schedule"], estimated["lin"]["schedule"]) == ("cosine", "linear")
    header = next(line for line in board.splitlines() if "variant" in line and "verdict" in line)
    assert "sched" in header
    assert any("lin" in line and "linear" in line for line in board.splitlines())
