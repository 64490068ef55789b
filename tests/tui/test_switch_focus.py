"""A pane switch moves focus into the pane shown, and the focus change costs only what it changes:
the panes that gain and lose focus are restyled, not the widgets inside them, and the keys still
reach the pane (its scroll bindings, through the focused pane)."""

from __future__ import annotations

import gc
from collections.abc import Iterable

from textual.dom import DOMNode

from .test_replay import all_done
from .waiting import wait_for


async def test_a_switch_restyles_the_two_panes_not_their_children(replay_app, monkeypatch) -> None:
    app = replay_app(gpus=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the session to start")
        await pilot.press("2")
        await pilot.pause()
        restyled: list[DOMNode] = []
        update_nodes = app.stylesheet.update_nodes

        def counting(nodes: Iterable[DOMNode], animate: bool = False) -> None:
            nodes = list(nodes)
            restyled.extend(nodes)
            update_nodes(nodes, animate=animate)

        monkeypatch.setattr(app.stylesheet, "update_nodes", counting)
        await pilot.press("3")
        await pilot.pause()
        assert app.focused is app.counters_pane
        inside = set(app.counters_pane.walk_children()) | set(app.batch_pane.walk_children())
        assert inside, "the panes have children"
        assert app.counters_pane in restyled and app.batch_pane in restyled
        assert not inside & set(restyled), [type(n).__name__ for n in inside & set(restyled)]


async def test_the_keys_still_scroll_the_pane_shown(replay_app) -> None:
    app = replay_app(gpus=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the session to start")
        await pilot.press("a")
        await wait_for(pilot, lambda: all_done(app), "every step")
        await pilot.press("2")  # the inspected batch: longer than the pane at 80×24
        await wait_for(pilot, lambda: app.batch_pane.max_scroll_y > 0, "the batch drawn")
        assert app.focused is app.batch_pane and app.batch_pane.scroll_y == 0
        await pilot.press("pagedown")
        await wait_for(pilot, lambda: app.batch_pane.scroll_y > 0, "the pane to scroll")


async def test_the_startup_heap_is_frozen_while_the_app_runs(replay_app) -> None:
    app = replay_app(gpus=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the session to start")
        await wait_for(pilot, lambda: gc.get_freeze_count() > 0, "the heap frozen")
    assert gc.get_freeze_count() == 0  # handed back to the collector at exit
