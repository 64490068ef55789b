"""The README's pictures are what the app draws now: `screenshots/make.py` regenerates them from
the recorded demo, and this test fails when the committed ones no longer match (regenerate with
`.venv/bin/python screenshots/make.py`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PANES = ("gates", "batch", "counters", "board", "plan")


def _driver_present() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(
    _driver_present(), reason="the Counters picture shows this machine's GPUs: made without a driver"
)
def test_the_committed_screenshots_are_what_the_app_draws_now(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(REPO / "screenshots" / "make.py"), "--out", str(tmp_path)], check=True
    )
    stale = [
        p
        for p in PANES
        if (tmp_path / f"{p}.svg").read_bytes() != (REPO / "screenshots" / f"{p}.svg").read_bytes()
    ]
    assert not stale, f"screenshots/{stale} differ from what the app draws: run screenshots/make.py"
