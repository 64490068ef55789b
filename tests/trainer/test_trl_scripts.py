"""TRL's own `trl/scripts/sft.py` and `dpo.py`, run in place from the installed package: the campaign
`init --trainer` writes for them (its LR board from `--learning_rate`, its seed the script's
default) passes every gate, and the resume after the board is bitwise.

These are scripts nobody here wrote. A correct setup must pass: before the fence around every
phase, the board's `set_seed(0)` made run A shuffle with seed 0 and the fresh process C with the
script's 42, and every such campaign failed its resume.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from pilot_tui.commands.cli import main

from .conftest import run_file_in_process

pytestmark = pytest.mark.slow
trl_scripts = Path(pytest.importorskip("trl").__file__).parent / "scripts"


def _splits(folder: Path, rows: list[dict[str, Any]]) -> Path:
    """A dataset folder as `load_dataset(path)` reads it: train.jsonl and test.jsonl."""
    folder.mkdir(parents=True, exist_ok=True)
    cut = int(len(rows) * 0.85)
    for name, part in (("train", rows[:cut]), ("test", rows[cut:])):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    return folder


@pytest.mark.parametrize("name", ["sft", "dpo"])
def test_trls_own_script_passes_every_gate_with_the_board_init_writes(
    name, tiny, tmp_path, monkeypatch
) -> None:
    if name == "sft":
        rows = [json.loads(line) for line in Path(tiny.chat).read_text().splitlines()]
        extra = ["--assistant_only_loss", "true"]
    else:
        pc = [json.loads(line) for line in Path(tiny.prompt_completion).read_text().splitlines()]
        rows = [
            {"prompt": r["prompt"], "chosen": r["completion"], "rejected": r["completion"][::-1]} for r in pc
        ]
        extra = []
    data = _splits(tmp_path / "data", rows)
    args = [
        "--model_name_or_path", str(tiny.model),
        "--dataset_name", str(data),
        "--output_dir", "out",
        "--max_steps", "8",
        "--per_device_train_batch_size", "2",
        "--learning_rate", "1e-3",
        "--bf16", "false",
        "--eval_strategy", "steps",
        "--eval_steps", "4",
        "--report_to", "none",
        *extra,
    ]  # fmt: skip
    campaign = tmp_path / "campaign"
    campaign.mkdir()
    monkeypatch.chdir(campaign)
    assert (
        main(["init", "--trainer", str(trl_scripts / f"{name}.py"), "--out", "campaign.toml", "--", *args])
        == 0
    )
    written = tomllib.loads((campaign / "campaign.toml").read_text())
    assert written["lr_board"]["control"] == 1e-3 and written["lr_board"]["seeds"] == [42], written[
        "lr_board"
    ]
    # Kept short for the suite: the board's budget, no memory variants, no estimate.
    written["lr_board"] |= {"updates": 4, "validate_every": 2}
    written.pop("variants", None)
    written["phases"] = written.get("phases", {}) | {"skip": ["estimate", "machine"], "steady_precision": 0.0}
    (campaign / "campaign.toml").write_text(tomli_w.dumps(written))
    run = run_file_in_process(campaign / "campaign.toml")
    assert run.rc == 0, run.out
    assert set(run.verdicts().values()) == {"pass"}, run.out
    assert any(step.startswith("lr_run@") for step in run.verdicts())
    steps = run.row("resume")["details"]["steps"]
    assert steps and all(s["loss_same"] and s["digest_same"] and s["learning_rate_same"] for s in steps)
