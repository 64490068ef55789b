"""The export serves alone: reloaded in a new process from its folder and nothing else, it must
hold a tokenizer a server can load (and the rest a server reads). A script that never hands the
Trainer its tokenizer exports weights alone: final fails, naming the missing piece and the line
that adds it; its twin, which passes `processing_class=tokenizer`, passes."""

from __future__ import annotations

import pytest

from pilot_tui.core import phase_table

from .conftest import run_in_process

pytestmark = pytest.mark.slow
ONLY = {"skip": [p for p in phase_table.names() if p not in ("load", "export", "final")]}


def _args(tiny) -> list[str]:
    return ["--model", str(tiny.model), "--data", str(tiny.prompt_completion), "--output_dir", "out"]


@pytest.mark.parametrize(
    ("script", "verdict"), [("no_tokenizer_saved.py", "fail"), ("plain_trainer.py", "pass")]
)
def test_an_export_without_its_tokenizer_cannot_be_served_alone(tiny, tmp_path, script, verdict):
    run = run_in_process(tmp_path, script, _args(tiny), phases=ONLY, replay={"inputs": ["rev: abc ="]})
    row = run.row("final")
    assert row["verdict"] == verdict, run.out
    served = row["details"]["served_alone"]
    if verdict == "fail":
        assert "tokenizer_error" in served
        assert "no tokenizer a server can load" in row["reason"]
        assert "processing_class=tokenizer" in row["reason"]
    else:
        assert served["tokenizer"] and not served.get("generation_config_error")
        assert served.get("generation_use_cache") is not False
