"""No silent wait for a new process: while a fresh process runs, the step's progress line says
what it does and counts its seconds (the final reload here; resume, a trainer's process C and a
fresh capture say theirs the same way)."""

from __future__ import annotations

from pilot_tui.core.events import PhaseProgress
from pilot_tui.core.spec import load_spec
from pilot_tui.core.steps import Step
from pilot_tui.runner.context import RunContext, pick_device
from pilot_tui.runner.phases import execute
from pilot_tui.tasks.loader import load_task


def test_the_final_reload_says_what_it_waits_for(write_campaign, tmp_path):
    loaded = load_spec(write_campaign(drop=("variants", "lr_board")))
    events: list = []
    ctx = RunContext(loaded, load_task(loaded), pick_device("cpu"), events.append, tmp_path / "work")
    for phase in ("first_step", "export", "final"):
        assert execute(ctx, Step.of(phase), {})["verdict"] != "fail"
    said = [e.message for e in events if isinstance(e, PhaseProgress) and e.step == "final"]
    assert said and all(m.startswith("reloading the export in a new process (") for m in said), said
    assert said[0].endswith(" s)")
