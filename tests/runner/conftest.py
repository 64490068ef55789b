"""Fixtures the runner's tests share."""

from __future__ import annotations

import pytest
import torch

from pilot_tui.core.spec import load_spec
from pilot_tui.runner.context import RunContext
from pilot_tui.tasks.loader import load_task


@pytest.fixture(scope="module")
def fast_demo_ctx(tmp_path_factory: pytest.TempPathFactory) -> RunContext:
    """The fast demo campaign's context (real task, real splits), on the CPU; one per module."""
    import tomli_w

    from tests.conftest import FAST, deep_merge, demo_raw

    folder = tmp_path_factory.mktemp("fast-demo")
    path = folder / "campaign.toml"
    path.write_text(tomli_w.dumps(deep_merge(demo_raw(), FAST)))
    loaded = load_spec(path)
    return RunContext(loaded, load_task(loaded), torch.device("cpu"), emit=lambda _m: None, work_dir=folder)
