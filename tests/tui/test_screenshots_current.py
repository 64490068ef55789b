"""The README's pictures are what the app draws now: `screenshots/make.py` regenerates them from
the recorded demo, and this test fails when the committed ones no longer match (regenerate with
`.venv/bin/python screenshots/make.py`)."""

from __future__ import annotations

import difflib
import html
import re
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


def _stale(out: Path) -> list[str]:
    out.mkdir()
    subprocess.run([sys.executable, str(REPO / "screenshots" / "make.py"), "--out", str(out)], check=True)
    return [
        p
        for p in PANES
        if (out / f"{p}.svg").read_bytes() != (REPO / "screenshots" / f"{p}.svg").read_bytes()
    ]


def _text(path: Path) -> list[str]:
    return [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", path.read_text())]


@pytest.mark.skipif(
    _driver_present(), reason="the Counters picture shows this machine's GPUs: made without a driver"
)
def test_the_committed_screenshots_are_what_the_app_draws_now(tmp_path: Path) -> None:
    stale = _stale(tmp_path / "first")
    if stale:
        # A picture taken a frame early on a loaded machine (seen once in CI for the Board) differs
        # once; a stale one differs every time: a second drawing tells them apart.
        stale = [p for p in _stale(tmp_path / "again") if p in stale]
    shown = [
        line
        for p in stale
        for line in difflib.unified_diff(
            _text(REPO / "screenshots" / f"{p}.svg"), _text(tmp_path / "again" / f"{p}.svg"), lineterm="", n=0
        )
    ]
    assert not stale, (
        f"screenshots/{stale} differ from what the app draws (run screenshots/make.py):\n"
        + "\n".join(shown[:40])
    )
