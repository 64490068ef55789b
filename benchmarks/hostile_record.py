"""A record with 2 MB strings: time to the dashboard's first frame, beside the plain record.

    .venv/bin/python benchmarks/hostile_record.py [--mb 2] [--repeat 3]

Every string field of the test record gets `--mb` MB of text plus terminal escapes and markup
(what `tests/tui/test_hostile_record.py` checks for inertness); the first frame of both records
is timed side by side, from constructing `PilotApp` to the first frame painted (headless
driver, 140×40), and each pane is visited once. Before the rendering bound (pilot_tui/text.py),
the 2 MB record took 22.7 s to its first frame.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import tomli_w

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pilot_tui.tui.app import PilotApp  # noqa: E402

RECORD = REPO / "tests" / "tui" / "data" / "record.toml"
HOSTILE = "\x1b]0;pwned\x07\x1b[2J[bold]B[/bold]run[/bold]x"
KEEP = {"spec_text", "spec", "verdict", "status", "kind", "name", "precision", "stop_cause"}


def inflate(value, size: int, key: str = ""):
    if key in KEEP:
        return value
    if isinstance(value, str):
        return value + "y" * size + HOSTILE
    if isinstance(value, dict):
        return {k: inflate(v, size, k) for k, v in value.items()}
    if isinstance(value, list):
        return [inflate(v, size, key) for v in value]
    return value


async def first_frame(path: Path) -> float:
    t0 = time.perf_counter()
    app = PilotApp(path)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        first = time.perf_counter() - t0
        for key in "2345":
            await pilot.press(key)
            await pilot.pause()
    return first


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    data = tomllib.loads(RECORD.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "hostile.toml"
        # The 2 MB goes into the first row's reason and every run id; other strings get 1 kB.
        data = inflate(data, 1000)
        data["phases"][0]["reason"] = "y" * int(args.mb * 1e6) + HOSTILE
        for run in data.get("runs", []):
            run["id"] = "r" * int(args.mb * 1e6)
        big.write_text(tomli_w.dumps(data))
        plain, hostile = [], []
        for _ in range(args.repeat):
            plain.append(asyncio.run(first_frame(RECORD)))
            hostile.append(asyncio.run(first_frame(big)))
        p, h = statistics.median(plain), statistics.median(hostile)
        print(
            f"record file: plain {RECORD.stat().st_size / 1e3:.0f} kB, hostile {big.stat().st_size / 1e6:.1f} MB"
        )
        print(
            f"first frame, median of {args.repeat}: plain {p:.2f} s · {args.mb:g} MB strings {h:.2f} s · ratio {h / p:.2f}"
        )


if __name__ == "__main__":
    main()
