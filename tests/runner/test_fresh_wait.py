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


def test_a_slow_model_build_says_so_and_counts_its_seconds(write_campaign, tmp_path):
    """A user's model that takes seconds to build (weights read from a slow disk, say): the load
    step's line says what it waits for instead of staying silent."""
    import dataclasses
    import time

    loaded = load_spec(write_campaign(drop=("variants", "lr_board")))
    task = load_task(loaded)
    build = task.build_model

    def slow_build():
        time.sleep(3.5)
        return build()

    events: list = []
    slow = dataclasses.replace(task, build_model=slow_build)
    ctx = RunContext(loaded, slow, pick_device("cpu"), events.append, tmp_path / "work")
    assert execute(ctx, Step.of("load"), {})["verdict"] != "fail"
    said = [e.message for e in events if isinstance(e, PhaseProgress) and e.step == "load"]
    building = [m for m in said if m.startswith("building the model and its optimizer (")]
    assert building and building[0].endswith(" s)"), said
    # Nothing before the wait is worth a line (2 s); then one a second.
    assert 1 <= len(building) <= 3, building
