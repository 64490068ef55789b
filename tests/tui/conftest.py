"""TUI test fixtures: the recorded demo replayed into the app, and the saved record."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from pilot_tui.session.driver import replay_session
from pilot_tui.tui.app import PilotApp
from pilot_tui.tui.nvml import NvmlProbe

from .fake_nvml import FakeNvml, NoDriverNvml

DATA = Path(__file__).resolve().parent / "data"
CAMPAIGN = DATA / "campaign.toml"
RECORDING = DATA / "recording.jsonl"
RECORD = DATA / "record.toml"


@pytest.fixture
def replay_app(tmp_path: Path) -> Callable[..., PilotApp]:
    """replay_app(gpus=True) -> a PilotApp fed from the recorded demo, records in tmp_path."""

    def make(gpus: bool = True) -> PilotApp:
        source = replay_session(CAMPAIGN, RECORDING, records_dir=tmp_path / "records")
        return PilotApp(source=source, nvml=NvmlProbe(FakeNvml() if gpus else NoDriverNvml()))

    return make


@pytest.fixture
def saved_record(tmp_path: Path) -> Path:
    """A writable copy of the recorded demo's record (notes may be added to it)."""
    path = tmp_path / RECORD.name
    shutil.copy(RECORD, path)
    return path
