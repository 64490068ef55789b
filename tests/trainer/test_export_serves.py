"""The export serves alone: reloaded in a new process from its folder and nothing else, it must
hold a tokenizer a server can load (and the rest a server reads). A script that never hands the
Trainer its tokenizer exports weights alone: final fails, naming the missing piece and the line
that adds it; its twin, which passes `processing_class=tokenizer`, passes."""

from __future__ import annotations

import pytest

from pilot_tui.core import phase_table

from .conftest import run_in_process

pytestmark = pytest.mark.slow
# In turn, or with an LR board between export and final: final's new process then starts ahead,
# beside the board's run (runner/subject/trainer/reload_process.py). Both ways must judge alike.
KEPT = {"": ("load", "export", "final"), "lr_run": ("load", "export", "lr_run", "final")}
BOARD = {"control": 1e-3, "variants": [], "seeds": [0], "updates": 2, "validate_every": 2}


def _args(tiny) -> list[str]:
    return ["--model", str(tiny.model), "--data", str(tiny.prompt_completion), "--output_dir", "out"]


@pytest.mark.parametrize("ahead", ["", "lr_run"], ids=["in-turn", "beside-the-board"])
@pytest.mark.parametrize(
    ("script", "verdict"), [("no_tokenizer_saved.py", "fail"), ("plain_trainer.py", "pass")]
)
def test_an_export_without_its_tokenizer_cannot_be_served_alone(tiny, tmp_path, script, verdict, ahead):
    phases = {"skip": [p for p in phase_table.names() if p not in KEPT[ahead]]}
    board = {"lr_board": BOARD} if ahead else {}
    run = run_in_process(
        tmp_path, script, _args(tiny), phases=phases, replay={"inputs": ["rev: abc ="]}, **board
    )
    row = run.row("final")
    assert row["verdict"] == verdict, run.out
    said = row["details"]["reload_process_ahead"]
    assert said.startswith("started beside lr_run@") == bool(ahead), said
    served = row["details"]["served_alone"]
    if verdict == "fail":
        assert "tokenizer_error" in served
        assert "no tokenizer a server can load" in row["reason"]
        assert "processing_class=tokenizer" in row["reason"]
    else:
        assert served["tokenizer"] and not served.get("generation_config_error")
        assert served.get("generation_use_cache") is not False
