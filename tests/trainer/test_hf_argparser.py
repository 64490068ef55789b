"""A `run_clm.py`-style script (HfArgumentParser, `default_data_collator`) that trains only
under `--do_train`."""

from __future__ import annotations

import pytest

from .conftest import NO_FINAL, passes_every_phase, run_campaign, run_in_process

pytestmark = pytest.mark.slow


def _args(tiny, *flags: str) -> list[str]:
    return [
        "--model_name_or_path", str(tiny.model),
        "--train_file", str(tiny.text),
        "--output_dir", "out",
        "--block_size", "32",
        "--learning_rate", "0.005",
        *flags,
    ]  # fmt: skip


def test_with_do_train_it_passes_every_phase(tiny, tmp_path):
    # Text blocks: every token is learnt, as the campaign declares. The resume re-runs the script
    # (its HfArgumentParser) in a new process; the final reload is the plain campaign's.
    run = run_in_process(
        tmp_path,
        "hf_argparser.py",
        _args(tiny, "--do_train", "--do_eval"),
        task={"supervise_prompt": True},
        phases=NO_FINAL,
    )
    passes_every_phase(run)
    assert run.row("load")["details"]["collator"] == "default_data_collator"
    steps = run.row("resume")["details"]["steps"]
    assert steps and all(s["digest_same"] for s in steps)


def test_without_do_train_it_says_train_was_never_called(tiny, tmp_path):
    run = run_campaign(tmp_path, "hf_argparser.py", _args(tiny, "--do_eval"))
    assert run.rc == 2, run.out
    (line,) = [ln for ln in run.out.splitlines() if ln.startswith("pilot-tui: error:")]
    assert "never called train()" in line and "--do_train" in line
    assert run.record is None
