"""A trainer worker reloads the campaign the runner read, or refuses: the arguments the runner
starts it with, parsed by the worker's side, name the same files with the same hashes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pilot_tui.core.hashing import sha256_file
from pilot_tui.core.spec import load_spec
from pilot_tui.runner.subject.trainer.campaign import load_checked
from pilot_tui.runner.subject.trainer.worker_args import worker_parser

from .conftest import SCRIPTS, write_campaign


def _args(folder: Path, script: Path) -> list[str]:
    loaded = load_spec(folder / "campaign.toml")
    return [
        "--spec", str(loaded.path),
        "--spec-sha256", loaded.sha256,
        "--script-sha256", sha256_file(script),
        "--threads", "0",
        "--out", str(folder / "out"),
    ]  # fmt: skip


@pytest.fixture
def campaign(tmp_path) -> tuple[Path, Path]:
    script = tmp_path / "train.py"
    shutil.copy(SCRIPTS / "plain_trainer.py", script)
    write_campaign(tmp_path, str(script), ["--output_dir", "out"])
    return tmp_path, script


def test_the_campaign_as_read_is_reloaded(campaign):
    folder, script = campaign
    args = worker_parser("worker").parse_args(_args(folder, script))
    assert load_checked(args).path == folder / "campaign.toml"


def test_a_script_edited_since_is_refused(campaign):
    folder, script = campaign
    args = worker_parser("worker").parse_args(_args(folder, script))
    script.write_text(script.read_text() + "\n# edited\n")
    with pytest.raises(ValueError, match=r"train\.py: the training script changed since"):
        load_checked(args)


def test_a_campaign_file_edited_since_is_refused(campaign):
    folder, script = campaign
    args = worker_parser("worker").parse_args(_args(folder, script))
    spec = folder / "campaign.toml"
    spec.write_text(spec.read_text() + "\n")
    with pytest.raises(ValueError, match=r"campaign\.toml: the campaign file changed since"):
        load_checked(args)
