"""Dashboard responsiveness: start-up to first frame, and key-press latency while the runner trains.

    .venv/bin/python benchmarks/ui.py [--presses 60]

(a) start-up: from constructing `PilotApp` (imports already done, as they are before `main`
    runs) to the first frame painted, in a headless Textual driver; plus the import cost of
    `pilot_tui.tui.app` measured in a fresh interpreter. Target < 1 s.
(b) latency: while the real runner trains a long `steady` phase (CPU, torch in its own
    process), post `down` / `up` keys to the Gates table and time each one until the first frame
    composed after the cursor moved (the app's `_display` call, made once the screen is rendered).
    Measured first with the runner idle, then training, side by side. p50 and p95 over >= 50
    presses. Target p95 < 100 ms on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tomli_w

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pilot_tui.tui.app import PilotApp  # noqa: E402
from pilot_tui.tui.state import RUNNING  # noqa: E402


def import_cost() -> float:
    code = "import time; t=time.perf_counter(); import pilot_tui.tui.app; print(time.perf_counter()-t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    return float(out.stdout.strip())


def long_campaign(folder: Path) -> Path:
    import tomllib

    raw = tomllib.loads((REPO / "campaigns" / "demo.toml").read_text())
    raw["task"]["options"] = {"n_conversations": 60, "seed": 0}
    raw["batch"].update(microbatch=2, accumulation=2)
    raw["phases"] = {
        "steady_updates": 100000,
        "skip": [
            "stack",
            "inspect",
            "split",
            "overfit",
            "eval_longest",
            "save",
            "export",
            "lr_run",
            "resume",
            "final",
        ],
    }
    raw.pop("variants", None)
    raw["limits"] = {}
    path = folder / "bench.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


class FrameClock:
    """Timestamps every frame the app composes (its `_display` call, made after rendering)."""

    def __init__(self, app: PilotApp) -> None:
        self.frames: list[float] = []
        original = app._display

        def display(screen, renderable):  # type: ignore[no-untyped-def]
            if renderable is not None:
                self.frames.append(time.perf_counter())
            return original(screen, renderable)

        app._display = display  # type: ignore[method-assign]


async def first_frame(campaign: Path, records: Path) -> float:
    t0 = time.perf_counter()
    app = PilotApp(campaign, records_dir=records)
    clock = FrameClock(app)
    async with app.run_test(size=(80, 24)) as pilot:
        while not clock.frames:
            await asyncio.sleep(0.001)
        elapsed = clock.frames[0] - t0
        await pilot.press("q")
    return elapsed


async def presses_timed(app: PilotApp, clock: FrameClock, n: int) -> list[float]:
    """Post a key, then wait for the first frame composed after the table cursor moved."""
    table = app.query_one("#gate-table")
    times = []
    for i in range(n):
        target = table.cursor_row + (1 if i % 2 == 0 else -1)
        t0 = time.perf_counter()
        app.simulate_key("down" if i % 2 == 0 else "up")
        moved_at = None
        while True:
            await asyncio.sleep(0.0005)
            if moved_at is None and table.cursor_row == target:
                moved_at = time.perf_counter()
            if moved_at is not None and clock.frames and clock.frames[-1] >= moved_at:
                times.append(clock.frames[-1] - t0)
                break
            if time.perf_counter() - t0 > 10:
                raise RuntimeError("no frame within 10 s of a key press")
        await asyncio.sleep(0.05)  # presses spaced like a person's, not measured
    return times


async def key_latency(campaign: Path, records: Path, presses: int) -> tuple[list[float], list[float], int]:
    """(idle runner, training runner, updates trained during the second series)."""
    app = PilotApp(campaign, records_dir=records)
    clock = FrameClock(app)
    async with app.run_test(size=(80, 24)) as pilot:
        deadline = time.monotonic() + 120
        while not app.runner.ready:
            assert time.monotonic() < deadline, "runner did not start"
            await pilot.pause(0.05)
        idle = await presses_timed(app, clock, presses)
        await pilot.press("a")
        while not (app.gates["steady"].status == RUNNING and app.gates["steady"].done > 0):
            assert time.monotonic() < deadline, "steady did not start"
            await pilot.pause(0.05)
        start_done = app.gates["steady"].done
        busy = await presses_timed(app, clock, presses)
        trained = app.gates["steady"].done - start_done
        await pilot.press("c")
    return idle, busy, trained


def percentiles(times: list[float]) -> tuple[float, float, float]:
    ms = sorted(t * 1000 for t in times)
    return statistics.median(ms), ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))], ms[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presses", type=int, default=60)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        campaign = long_campaign(folder)
        imp = import_cost()
        frame = asyncio.run(first_frame(campaign, folder / "records"))
        idle, busy, trained = asyncio.run(key_latency(campaign, folder / "records", args.presses))
    i50, i95, imax = percentiles(idle)
    p50, p95, pmax = percentiles(busy)
    cores = len(__import__("os").sched_getaffinity(0))
    print(f"machine: {cores} cores available")
    print(f"(a) import pilot_tui.tui.app (fresh interpreter): {imp * 1000:.0f} ms")
    print(
        f"(a) PilotApp() to first frame: {frame * 1000:.0f} ms  (import + first frame {(imp + frame) * 1000:.0f} ms; target < 1000 ms, ratio {(imp + frame) / 1.0:.2f})"
    )
    print(f"(b) key press -> screen update, {args.presses} presses each, Gates table cursor:")
    print(f"    runner idle:     p50 {i50:.1f} ms · p95 {i95:.1f} ms · max {imax:.1f} ms")
    print(
        f"    runner training: p50 {p50:.1f} ms · p95 {p95:.1f} ms · max {pmax:.1f} ms  ({trained} updates meanwhile)"
    )
    print(f"    training/idle p95 ratio {p95 / i95:.2f} · target p95 < 100 ms, ratio {p95 / 100:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
