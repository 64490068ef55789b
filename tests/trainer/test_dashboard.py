"""The dashboard on a trainer campaign, live: the Batch pane shows the trainer's own batches,
each token as padding / context / scored, document boundaries marked (a packed SFT script)."""

from __future__ import annotations

import pytest

# tests/ is on the import path (pytest's rootdir-relative packages): the dashboard tests' helpers.
from tui.fake_nvml import NoDriverNvml
from tui.test_readable import screen_text
from tui.waiting import wait_for

from pilot_tui.tui.app import PilotApp
from pilot_tui.tui.nvml import NvmlProbe

from .conftest import write_campaign

pytestmark = pytest.mark.slow

# Only what the Batch pane draws: the data gates (the capture itself happens at the runner's start).
LATER = [
    "estimate",
    "machine",
    "split",
    "overfit",
    "load",
    "first_step",
    "steady",
    "eval_longest",
    "save",
    "export",
    "resume",
    "final",
]


async def test_batch_pane_shows_the_packed_batches(tiny, tmp_path) -> None:
    args = [
        "--model_name_or_path", str(tiny.model),
        "--dataset_path", str(tiny.prompt_completion),
        "--output_dir", "out",
        "--max_length", "64",
        "--per_device_train_batch_size", "2",
        "--bf16", "false",
    ]  # fmt: skip
    path = write_campaign(tmp_path, "sft_packing.py", args, phases={"skip": LATER}, inspect={"examples": 1})
    app = PilotApp(path, records_dir=tmp_path / "records", nvml=NvmlProbe(NoDriverNvml()))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.runner.ready, "the runner to capture the script")
        await pilot.press("a")
        await wait_for(pilot, lambda: app.idle and app.gates["inspect"].finished, "inspect")
        assert app.gates["inspect"].status == "pass", app.gates["inspect"]
        await pilot.press("2")
        await wait_for(pilot, lambda: "document boundary" in screen_text(app), "the Batch pane's legend")
        text = screen_text(app)
        assert "│" in text and "window 0 · microbatch 0 · row 0" in text, text
        assert "normaliser" in text and "num_items_in_batch" in text, text
        assert "supervised" in text and "padding" in text  # the legend of token states
