"""Every way a training is launched: a package's console command (by its name, as
`llamafactory-cli train config.yaml` is typed, and by a path through a link) and a module
(`python -m pkg.module`), each piloted as given, the campaign `init` writes accepted by `run`.

The package (tests/data/trainer_package) is installed here by pip into a prefix of the test's
own, so its console command is the file pip writes (a shebang naming this Python). Its settings,
the learning rate and the seed included, live in a JSON config, not on the command line: the LR
board is built from that file.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import tomli_w

from pilot_tui.commands.cli import main
from pilot_tui.core import phase_table

from .conftest import SCRIPTS, run_file_in_process

pytestmark = pytest.mark.slow
PACKAGE = SCRIPTS.parent / "trainer_package"
KEEP = ("load", "first_step", "lr_run", "resume")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """tinytrain installed by pip into a prefix: its bin/ and site-packages."""
    root = tmp_path_factory.mktemp("tinytrain")
    source = shutil.copytree(PACKAGE, root / "src")  # pip builds in the source tree: a copy
    prefix = root / "prefix"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--prefix",
         str(prefix), str(source)],
        check=True,
    )  # fmt: skip
    return prefix


@pytest.fixture
def on_path(installed, monkeypatch) -> Path:
    """The prefix's packages importable here and in every process started from here; its bin/
    on PATH (the command is found by its name, as a user types it)."""
    site = Path(sysconfig.get_path("purelib", vars={"base": str(installed)}))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PATH", os.pathsep.join([str(installed / "bin"), os.environ["PATH"]]))
    return installed / "bin" / "tinytrain"


def _config(folder: Path, tiny) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    config = {"model": str(tiny.model), "data": str(tiny.prompt_completion), "output_dir": "out",
              "learning_rate": 0.002, "seed": 7, "max_steps": 6, "per_device_train_batch_size": 4}  # fmt: skip
    path.write_text(json.dumps(config))
    return path


def _init(folder: Path, monkeypatch, *argv: str) -> tuple[dict, str]:
    monkeypatch.chdir(folder)
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["init", *argv]) == 0
    return tomllib.loads((folder / "campaign.toml").read_text()), out.getvalue()


def _run_kept(folder: Path, written: dict):
    """The campaign init wrote, short for the suite: the phases that start the program again."""
    written.pop("variants", None)
    written["lr_board"] |= {"updates": 2, "validate_every": 1, "variants": []}
    written["phases"] = {"skip": [p for p in phase_table.names() if p not in KEEP], "steady_updates": 3}
    written["resume"] = {"k": 2, "n": 2}
    (folder / "campaign.toml").write_text(tomli_w.dumps(written))
    return run_file_in_process(folder / "campaign.toml")


def test_a_console_command_by_its_name_with_its_settings_in_a_config_file(
    on_path, tiny, tmp_path, monkeypatch
):
    _config(tmp_path, tiny)
    written, said = _init(tmp_path, monkeypatch, "--trainer", "tinytrain", "--", "train", "config.json")
    assert written["task"]["trainer_script"] == "tinytrain" and written["task"]["args"] == [
        "train",
        "config.json",
    ]
    # The LR and the seed are the config file's: the board around them, in the real run's order.
    assert written["lr_board"]["control"] == 0.002 and written["lr_board"]["seeds"] == [7]
    assert "wrote" in said and "differs" not in said  # nothing changed in the command
    run = _run_kept(tmp_path, written)
    assert run.rc == 0 and set(run.verdicts().values()) == {"pass"}, run.out
    assert run.row("load")["details"]["program"] == "tinytrain"
    assert run.row("lr_run@lr2e-3-s7")["verdict"] == "pass"


def test_a_module_run_as_python_dash_m(on_path, tiny, tmp_path, monkeypatch):
    _config(tmp_path, tiny)
    written, _ = _init(
        tmp_path, monkeypatch, "--trainer-module", "tinytrain.cli", "--", "train", "config.json"
    )
    assert written["task"]["trainer_module"] == "tinytrain.cli" and "trainer_script" not in written["task"]
    run = _run_kept(tmp_path, written)
    assert run.rc == 0 and set(run.verdicts().values()) == {"pass"}, run.out
    assert run.row("load")["details"]["program"] == "-m tinytrain.cli"


def test_paths_through_links_are_written_as_given(on_path, tiny, tmp_path, monkeypatch):
    """A command and a model folder reached through links: the campaign names the links, never
    what they point at (the user's layout moves with them)."""
    links = tmp_path / "links"
    links.mkdir()
    (links / "tinytrain").symlink_to(on_path)
    (links / "base").symlink_to(tiny.model)
    campaign = tmp_path / "campaign"
    _config(campaign, tiny)
    written, _ = _init(
        campaign,
        monkeypatch,
        "--trainer",
        "../links/tinytrain",
        "--",
        "train",
        "config.json",
        "--note",
        "../links/base",
    )
    assert written["task"]["trainer_script"] == "../links/tinytrain"
    assert written["task"]["args"][-1] == "../links/base"


def test_init_says_on_the_terminal_how_the_piloted_command_differs(tiny, tmp_path, monkeypatch):
    """An HfArgumentParser script trains only under --do_train: init adds it, says so where the
    user looks, keeps the command as typed in `given_args`, and the load row says it again."""
    args = ["--model_name_or_path", str(tiny.model), "--train_file", str(tiny.text), "--output_dir", "out",
            "--do_eval", "--block_size", "32", "--max_steps", "4"]  # fmt: skip
    written, said = _init(tmp_path, monkeypatch, "--trainer", str(SCRIPTS / "hf_argparser.py"), "--", *args)
    assert "the command piloted differs from yours" in said and "added --do_train" in said
    assert written["task"]["given_args"] == args and written["task"]["args"] == [*args, "--do_train"]
    written["phases"] = {"skip": [p for p in phase_table.names() if p != "load"]}
    written.pop("variants", None)
    written.pop("lr_board", None)
    (tmp_path / "campaign.toml").write_text(tomli_w.dumps(written))
    load = run_file_in_process(tmp_path / "campaign.toml").row("load")
    assert load["details"]["command_changed"] == ["added --do_train"]
    assert "the command piloted differs from yours: added --do_train" in load["reason"]
