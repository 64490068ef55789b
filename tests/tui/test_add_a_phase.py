"""docs/architecture.md's worked example, proved: a phase is a body plus one table entry.

The phase here is defined in this test module — nowhere in the package — and it still appears
in the campaign's steps, runs in the real runner code (on a thread: a separate process could not
see a phase defined here), lands in the TOML record, and shows as a row of the Gates pane.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from pilot_tui.core import phase_table
from pilot_tui.core.phase_table import PhaseInfo
from pilot_tui.core.steps import campaign_steps
from pilot_tui.runner.in_process import InProcessLink
from pilot_tui.runner.phases.base import PHASES, Outcome, PhaseRun, phase
from pilot_tui.session.driver import Session
from pilot_tui.tui.app import PilotApp
from pilot_tui.tui.nvml import NvmlProbe

from .fake_nvml import NoDriverNvml
from .waiting import wait_for


@pytest.fixture
def count_phase() -> Iterator[str]:
    """A new engine phase: its table entry (1) and its body (2); nothing else is edited."""
    phase_table.register(
        PhaseInfo("count_tokens", "engine", "counts the supervised tokens of the train split", "docs/x.md")
    )

    @phase("count_tokens")
    def count_tokens(ctx, run: PhaseRun) -> Outcome:
        return Outcome(details={"train_examples": len(ctx.splits["train"])})

    yield "count_tokens"
    phase_table.unregister("count_tokens")
    PHASES.pop("count_tokens", None)


def test_a_body_without_a_table_entry_is_refused() -> None:
    with pytest.raises(RuntimeError, match="no entry in the phase table"):
        phase("not_in_the_table")


def test_the_registry_and_the_table_must_agree() -> None:
    phase_table.check_registry(set(PHASES))  # the shipped phases agree
    with pytest.raises(RuntimeError, match="without a body: final"):
        phase_table.check_registry(set(PHASES) - {"final"})


async def test_a_phase_defined_here_runs_into_the_record_and_the_gates(
    count_phase: str, write_campaign, tmp_path: Path
) -> None:
    others = [p for p in phase_table.names() if p != count_phase]
    path = write_campaign({"phases": {"skip": others}})
    session = Session(path, tmp_path / "records", link=InProcessLink())
    # Engine group, after export: where the table put it, with no edit to steps.py.
    assert [s.key for s in campaign_steps(session.spec)] == [count_phase]
    app = PilotApp(source=session, nvml=NvmlProbe(NoDriverNvml()))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the runner to start")
        await pilot.press("n")
        await wait_for(pilot, lambda: app.gates[count_phase].finished, "the new phase to finish")
        gate = app.gates[count_phase]
        assert gate.status == "pass"
        assert gate.row.details["train_examples"] > 0
        assert app.query_one("#gate-table").row_count == 1
    saved = tomllib.loads(Path(app.record_path).read_text())
    assert [row["step"] for row in saved["phases"]] == [count_phase]
    assert saved["phases"][0]["details"]["train_examples"] == gate.row.details["train_examples"]
