"""`pilot-tui init --trainer train.py -- ARGS`: the campaign it writes for the user scripts of
tests/data/trainer_scripts (read back with the real spec loader, and one run headless), and the
one-line refusals (exit 2, nothing written)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from pilot_tui.commands.cli import main
from pilot_tui.core.spec import load_spec

SCRIPTS = Path(__file__).resolve().parents[1] / "data" / "trainer_scripts"


def _write_data(folder: Path) -> dict[str, Path]:
    """The tiny assets' JSONL files (no model: init never loads one)."""
    spec = importlib.util.spec_from_file_location("tiny_assets_rows", SCRIPTS / "tiny_assets.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    found = module.paths(folder)
    folder.mkdir(parents=True, exist_ok=True)
    module._write_jsonl(found.chat, module.chat_rows())
    module._write_jsonl(found.text, module.text_rows())
    module._write_jsonl(found.prompt_completion, module.prompt_completion_rows())
    return {"chat": found.chat, "text": found.text, "pc": found.prompt_completion}


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _init(tmp_path: Path, monkeypatch, *argv: str) -> int:
    monkeypatch.chdir(tmp_path)
    return main(["init", *argv])


def test_hf_argparser_script_gets_do_train_and_paths_relative_to_the_campaign(tmp_path, monkeypatch, capsys):
    data = _write_data(tmp_path / "data")
    out = tmp_path / "campaigns" / "clm.toml"  # a folder other than where init runs
    rc = _init(
        tmp_path,
        monkeypatch,
        "--trainer",
        str(SCRIPTS / "hf_argparser.py"),
        "--out",
        "campaigns/clm.toml",
        "--",
        "--model_name_or_path",
        "model",
        "--train_file",
        "data/text.jsonl",
        "--output_dir",
        "out",
        "--block_size",
        "32",
    )
    assert rc == 0, capsys.readouterr().err
    loaded = load_spec(out)  # the real loader: the campaign is valid as written
    task = loaded.spec.task
    assert loaded.resolve(task.trainer_script) == SCRIPTS / "hf_argparser.py"
    # The script starts in the campaign's folder: the data path must still find the file from there.
    i = task.args.index("--train_file")
    assert (out.parent / task.args[i + 1]).resolve() == data["text"].resolve()
    # A path that does not exist (yet) is the script's business: left as typed.
    assert task.args[task.args.index("--output_dir") + 1] == "out"
    assert task.args.count("--do_train") == 1 and task.args.count("--do_eval") == 1
    assert task.supervise_prompt is True  # bare text: every token is learnt
    assert set(task.requires) == {"transformers", "datasets"}
    assert loaded.spec.plan.dataset_size == len(data["text"].read_text().splitlines())
    assert len(loaded.spec.replay.inputs) == 3
    # Its batch and checkpointing are unknown until it runs: both memory variants; no LR in args,
    # so no LR board.
    assert [v.id for v in loaded.spec.variants] == ["mb1", "ckpt"]
    assert loaded.spec.lr_board is None
    text = out.read_text()
    assert "--do_train added" in text and "rewritten relative" in text


def test_flags_already_given_are_not_added_twice_and_a_chat_script_keeps_the_prompt_masked(
    tmp_path, monkeypatch, capsys
):
    data = _write_data(tmp_path)
    args = ["--model_name_or_path", "m", "--train_file", str(data["text"]), "--do_train", "--do-eval"]
    assert _init(tmp_path, monkeypatch, "--trainer", str(SCRIPTS / "hf_argparser.py"), "--", *args) == 0
    spec = load_spec(tmp_path / "campaign.toml").spec
    assert spec.task.args == args  # absolute path kept, nothing added
    # Microbatch 1 and checkpointing already in the args: no variant repeats them; the LR board
    # sits around the LR the args give.
    more = ["--per_device_train_batch_size", "1", "--gradient_checkpointing", "--learning_rate", "1e-3"]
    assert (
        _init(
            tmp_path,
            monkeypatch,
            "--trainer",
            str(SCRIPTS / "hf_argparser.py"),
            "--force",
            "--",
            *args,
            *more,
        )
        == 0
    )
    spec = load_spec(tmp_path / "campaign.toml").spec
    assert spec.variants == [] and spec.lr_board is not None
    assert spec.lr_board.control == 1e-3 and sorted(spec.lr_board.variants) == [5e-4, 2e-3]
    off = ["--gradient_checkpointing", "false"]
    assert (
        _init(
            tmp_path, monkeypatch, "--trainer", str(SCRIPTS / "hf_argparser.py"), "--force", "--", *args, *off
        )
        == 0
    )
    assert [v.id for v in load_spec(tmp_path / "campaign.toml").spec.variants] == ["mb1", "ckpt"]
    assert (
        _init(
            tmp_path,
            monkeypatch,
            "--trainer",
            str(SCRIPTS / "sft_chat.py"),
            "--out",
            "chat.toml",
            "--env",
            "TOKENIZERS_PARALLELISM=false",
            "--",
            "--model_name_or_path",
            "m",
            "--dataset",
            "chat.jsonl",
        )
        == 0
    )
    loaded = load_spec(tmp_path / "chat.toml")
    assert loaded.spec.task.args == ["--model_name_or_path", "m", "--dataset", "chat.jsonl"]
    assert loaded.spec.task.env == {"TOKENIZERS_PARALLELISM": "false"}
    assert loaded.spec.task.supervise_prompt is False
    assert "trl" in loaded.spec.task.requires
    first_user = next(m["content"] for m in _rows(data["chat"])[0]["messages"] if m["role"] == "user")
    assert loaded.spec.replay.inputs[0] == first_user


@pytest.mark.parametrize(
    ("case", "expect"),
    [
        ("missing", "no such file"),
        ("syntax", "line 2"),
        ("directory", "is a directory"),
        ("not_python", "not a Python program"),
        ("bad_env", "not a valid environment variable"),
        ("env_without_value", "expected NAME=VALUE"),
        ("with_model", "not --model/--data"),
        ("exists", "already exists"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, monkeypatch, capsys, case, expect):
    good = tmp_path / "train.py"
    good.write_text((SCRIPTS / "plain_trainer.py").read_text())
    script, extra = good, []
    if case == "missing":
        script = tmp_path / "nope.py"
    elif case == "syntax":
        script = tmp_path / "broken.py"
        script.write_text("import transformers\ndef main(:\n    pass\n")
    elif case == "directory":
        script = tmp_path / "folder.py"
        script.mkdir()
    elif case == "not_python":
        script = tmp_path / "train.sh"
        script.write_text("python train.py\n")
    elif case == "bad_env":
        extra = ["--env", "1BAD=x"]
    elif case == "env_without_value":
        extra = ["--env", "NOVALUE"]
    elif case == "with_model":
        extra = ["--model", "m"]
    elif case == "exists":
        (tmp_path / "campaign.toml").write_text("# mine\n")
    rc = _init(tmp_path, monkeypatch, "--trainer", str(script), *extra, "--", "--model", "m")
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.count("\n") == 0 and expect in err, err
    if case in ("missing", "syntax", "directory", "not_python"):
        assert str(script) in err
    if case == "exists":
        assert (tmp_path / "campaign.toml").read_text() == "# mine\n"
    else:
        assert not (tmp_path / "campaign.toml").exists()
    # The correct twin of every case writes the campaign.
    assert _init(tmp_path, monkeypatch, "--trainer", str(good), "--force", "--", "--model", "m") == 0
    # Named as the user gave it: an absolute path stays absolute.
    assert load_spec(tmp_path / "campaign.toml").spec.task.trainer_script == str(good)


def test_a_script_that_never_calls_train_is_written_with_a_warning(tmp_path, monkeypatch, capsys):
    script = tmp_path / "build_only.py"
    script.write_text("from transformers import Trainer\n\ntrainer = Trainer(model=None)\n")
    assert _init(tmp_path, monkeypatch, "--trainer", str(script)) == 0
    out = capsys.readouterr().out
    assert "WARNING" in out and ".train(" in out
    assert "WARNING: no `.train(` call" in (tmp_path / "campaign.toml").read_text()
    # Its twin that trains gets no warning.
    script.write_text(script.read_text() + "trainer.train()\n")
    assert _init(tmp_path, monkeypatch, "--trainer", str(script), "--force") == 0
    assert "WARNING" not in capsys.readouterr().out


def test_plain_init_still_needs_model_and_data(tmp_path, monkeypatch, capsys):
    assert _init(tmp_path, monkeypatch, "--model", "m") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--model DIR and --data" in err and "--trainer" in err


@pytest.mark.slow
def test_the_written_campaign_runs_every_gate_of_a_plain_trainer_script(
    tmp_path, tmp_path_factory, monkeypatch, capsys
):
    pytest.importorskip("trl", reason="the [trl] extra is not installed: pip install -e '.[test,hf,trl]'")
    # The trainer tests' tiny assets, built once per session whichever worker asks first.
    from trainer.conftest import _tiny_assets, locked, shared_root

    shared = shared_root(tmp_path_factory) / "trainer-tiny"
    with locked(shared):
        assets = _tiny_assets().build(shared)
    (tmp_path / "tiny").symlink_to(shared, target_is_directory=True)
    rc = _init(
        tmp_path,
        monkeypatch,
        "--trainer",
        str(SCRIPTS / "plain_trainer.py"),
        "--out",
        "c/campaign.toml",
        "--",
        "--model",
        "tiny/model",
        "--data",
        "tiny/prompt_completion.jsonl",
        "--output_dir",
        "out",
    )
    assert rc == 0
    # As written but for the estimate (fake tensors: seconds on a loaded CPU), the resume and the
    # final reload (each a new process): test_plain_trainer's campaign runs them on this script
    # and model.
    written = tmp_path / "c" / "campaign.toml"
    text = written.read_text()
    assert text.count("\n[phases]\n") == 1 and "skip" not in tomllib.loads(text)["phases"]
    # Steady times its minimum count (a precision would take seconds per variant): the plain
    # Trainer's campaign times to a precision.
    skipped = '\n[phases]\nskip = ["estimate", "resume", "final"]\nsteady_precision = 0.0\n'
    written.write_text(text.replace("\n[phases]\n", skipped))
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(
        [sys.executable, "-m", "pilot_tui", "run", "c/campaign.toml", "--headless"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = next((tmp_path / "c" / "records").glob("*.toml"))
    rows = tomllib.loads(record.read_text())["phases"]
    assert {r["verdict"] for r in rows} == {"pass"}, proc.stdout
    assert not {"estimate", "resume", "final"} & {r["name"] for r in rows}
    ran = {(r["name"], r["variant"]) for r in rows}
    assert {("first_step", "mb1"), ("steady", "ckpt")} <= ran  # the variants init wrote ran
    assert assets.model.is_dir()
