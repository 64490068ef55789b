"""Produce an SVG of each dashboard pane (screenshots/<pane>.svg) on the demo campaign.

    .venv/bin/python screenshots/make.py            # replay the recorded demo run (seconds)
    .venv/bin/python screenshots/make.py --live     # run campaigns/demo.toml for real (minutes)

The default replays `tests/tui/data/recording.jsonl` — a real run of the demo campaign made small
(regenerate it with tests/tui/data/make_recording.py) — so the pictures are reproducible. The GPU
table shows this machine's NVML view: on a machine without an NVIDIA driver it says so.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from pilot_tui import DEMO_CAMPAIGN  # noqa: E402
from pilot_tui.analysis.plan import rental  # noqa: E402
from pilot_tui.session.driver import replay_session  # noqa: E402
from pilot_tui.tui.app import PilotApp  # noqa: E402

DATA = REPO / "tests" / "tui" / "data"
PANES = {"gates": "1", "batch": "2", "counters": "3", "board": "4", "plan": "5"}
SIZE = (120, 36)
BOUND_S = 3600.0


async def shoot(app: PilotApp, out: Path) -> list[Path]:
    written = []
    async with app.run_test(size=SIZE) as pilot:
        deadline = time.monotonic() + BOUND_S

        async def until(condition, what: str) -> None:
            while not condition():
                if time.monotonic() > deadline:
                    raise SystemExit(f"screenshots: timed out waiting for {what}")
                await pilot.pause(0.1)

        await until(lambda: app.runner.ready, "the runner")
        await pilot.press("a")
        await until(lambda: app.idle and all(g.finished for g in app.gates.values()), "every step")
        await until(lambda: "plan" in app.sections and app.nvml_snapshot is not None, "the plan")
        await pilot.press("ctrl+home")  # the cursor followed the run as far as redraws saw it
        for pane, key in PANES.items():
            await pilot.press(key)
            await until(lambda: not app.dirty & {app.tabs.active}, f"pane {pane}")
            # The Board draws its curves at most twice a second: wait for that frame, or the
            # picture depends on when it was taken.
            await until(lambda: not app.board_pane.plot_pending, f"pane {pane}'s curves")
            await pilot.pause()
            path = out / f"{pane}.svg"
            path.write_text(app.export_screenshot(title=f"pilot-tui · {pane}"))
            written.append(path)
        await pilot.press("q")
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--live", action="store_true", help="run campaigns/demo.toml with the real runner")
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.live:
            app = PilotApp(DEMO_CAMPAIGN, records_dir=Path(tmp))
        else:
            # The replay's plan checks the disk here: a fixed free space, or its figure's length
            # (wrapping below the first screen) would move the Plan's scroll bar from machine to machine.
            rental.free_bytes = lambda folder: 100 * 2**30
            source = replay_session(DATA / "campaign.toml", DATA / "recording.jsonl", records_dir=Path(tmp))
            app = PilotApp(source=source)
        # The tabs' underline slides to the pane just chosen: drawn mid-slide, the picture would
        # depend on the moment it was taken. Without animations it is where it ends.
        app.animation_level = "none"
        for path in asyncio.run(shoot(app, args.out)):
            print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
