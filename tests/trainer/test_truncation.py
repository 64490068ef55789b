"""Silent truncation at max_length: an SFT script whose max_length cuts most chats loses their
replies' ends (the model never learns to stop there); the same script at a max_length that fits
passes. Read from the rows as the script cut them, at the trainer's own max_length."""

from __future__ import annotations

import pytest

from pilot_tui.core import phase_table

from .conftest import run_in_process

pytestmark = pytest.mark.slow
ONLY = {"skip": [p for p in phase_table.names() if p not in ("inspect",)]}


@pytest.mark.parametrize(("max_length", "verdict"), [(24, "fail"), (96, "pass")])
def test_a_max_length_that_cuts_the_replies_fails_inspect(tiny, tmp_path, max_length, verdict):
    args = ["--model_name_or_path", str(tiny.model), "--dataset", str(tiny.chat), "--output_dir", "out",
            "--max_length", str(max_length)]  # fmt: skip
    run = run_in_process(tmp_path, "sft_chat.py", args, phases=ONLY)
    check = next(c for c in run.row("inspect")["details"]["checks"] if c["name"] == "truncation")
    assert check["verdict"] == verdict, check["message"]
    if verdict == "fail":
        assert f"are cut at {max_length} tokens (the trainer's max_length {max_length}" in check["message"]
        assert "losing the end of their reply" in check["message"] and check["count"] > 0
    else:
        assert f"no train row reaches the cut at {max_length} tokens" in check["message"]
