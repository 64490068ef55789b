"""A pane switch re-renders nothing that did not change since the pane was last shown: each pane
keeps what it drew, and a visit with nothing new leaves every widget's content as it was."""

from __future__ import annotations

from textual.widgets import Static

from pilot_tui.core.events import Counters
from pilot_tui.tui.messages import CountersMsg

from .test_replay import text_of
from .waiting import wait_for

PANES = ("2", "3", "4", "5", "1")
STATICS = ("#batch-body", "#nvml", "#runner", "#history-label", "#plan-body", "#gate-detail", "#variants")


def contents(app) -> dict[str, int]:
    return {s: id(app.query_one(s, Static).content) for s in STATICS}


async def visit_all(pilot) -> None:
    for key in PANES:
        await pilot.press(key)
        await pilot.pause()


async def test_a_second_visit_with_nothing_new_redraws_no_widget(replay_app) -> None:
    app = replay_app(gpus=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the session to start")
        await pilot.press("a")
        await wait_for(pilot, lambda: app.idle and "plan" in app.sections, "every step and the plan")
        # Every pane drawn once with the final state. The counters stay dirty (NVML and CPU are
        # sampled twice a second) but say the same: drawing them changes nothing.
        await visit_all(pilot)
        before = contents(app)
        await visit_all(pilot)
        assert contents(app) == before


async def test_a_counter_sample_redraws_the_counters_only_when_their_text_changes(replay_app) -> None:
    app = replay_app(gpus=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the session to start")
        await pilot.press("3")

        def sample(rss: float) -> CountersMsg:
            return CountersMsg(Counters(time=0.0, device="cpu", values={"rss_mb": rss}))

        app.post_message(sample(300.0))
        await wait_for(pilot, lambda: "300 MiB" in text_of(app, "#runner"), "a sample")
        drawn = id(app.query_one("#runner", Static).content)
        app.post_message(sample(300.2))  # the same text at the precision shown: not redrawn
        await pilot.press("1", "3")
        await pilot.pause()
        assert id(app.query_one("#runner", Static).content) == drawn
        app.post_message(sample(512.0))
        await wait_for(pilot, lambda: "512 MiB" in text_of(app, "#runner"), "a change")
