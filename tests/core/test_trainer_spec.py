"""`[task] trainer_script`: what a trainer campaign may declare, each mistake one line naming the
key and its line, each beside a correct twin that loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from pilot_tui.core.spec import SpecError, load_spec

GOOD = """[campaign]
name = "sft"

[task]
trainer_script = "train.py"
args = ["--model", "m", "--do_train"]
env = { TOKENIZERS_PARALLELISM = "false" }
"""


def _write(tmp_path: Path, text: str, script: bool = True) -> Path:
    if script:
        (tmp_path / "train.py").write_text("print('hi')\n")
    path = tmp_path / "campaign.toml"
    path.write_text(text)
    return path


def test_a_trainer_campaign_needs_no_batch_and_keeps_its_args(tmp_path):
    spec = load_spec(_write(tmp_path, GOOD)).spec
    assert spec.task.trainer_script == "train.py"
    assert spec.task.args == ["--model", "m", "--do_train"]
    assert spec.task.env == {"TOKENIZERS_PARALLELISM": "false"}
    # Placeholders the runner replaces with the trainer's own figures.
    assert spec.batch.microbatch == 1


def test_a_variant_may_change_the_scripts_args_and_env(tmp_path):
    text = GOOD + (
        '\n[[variants]]\nid = "bf16"\nargs = ["--bf16"]\nenv = { ACCELERATE_MIXED_PRECISION = "bf16" }\n'
        '\n[[variants]]\nid = "mb2"\nmicrobatch = 2\n'
    )
    bf16, mb2 = load_spec(_write(tmp_path, text)).spec.variants
    assert bf16.args == ["--bf16"] and bf16.env == {"ACCELERATE_MIXED_PRECISION": "bf16"}
    assert bf16.fresh_capture and bf16.values == {}
    assert not mb2.fresh_capture and mb2.get("microbatch") == 2


def test_batch_device_is_still_the_campaigns(tmp_path):
    spec = load_spec(_write(tmp_path, GOOD + '\n[batch]\ndevice = "cpu"\n')).spec
    assert spec.batch.device == "cpu"


def test_ddp_launches_the_scripts_ranks(tmp_path):
    text = GOOD + '\n[distributed]\nstrategy = "ddp"\nnproc_per_node = 2\nbackend = "gloo"\nnnodes = 1\n'
    spec = load_spec(_write(tmp_path, text)).spec
    assert spec.distributed.strategy == "ddp" and spec.distributed.world == 2
    assert spec.batch.replicas == 2  # the world size, as in any distributed campaign
    # A variant changing the batch in place runs on the ranks like the control.
    spec = load_spec(_write(tmp_path, text + '\n[[variants]]\nid = "mb2"\nmicrobatch = 2\n')).spec
    assert spec.variants[0].values == {"microbatch": 2}


def test_a_fit_search_over_microbatches_is_a_trainers_too(tmp_path):
    # The correct twin of the max-lengths mistake: microbatches change trainer.args in place.
    spec = load_spec(_write(tmp_path, GOOD + "\n[fit_search]\nmicrobatches = [1, 2, 4]\n")).spec
    assert spec.fit_search is not None and spec.fit_search.microbatches == [1, 2, 4]


CASES = {
    "optim": (
        GOOD + "\n[optim]\nlr = 0.1\n",
        "line 9: optim: not used with task.trainer_script: the optimizer",
    ),
    "split": (GOOD + "\n[split]\ntrain = 0.9\nvalidation = 0.1\ntest = 0.0\n", "line 9: split: not used"),
    "batch.microbatch": (
        GOOD + "\n[batch]\nmicrobatch = 4\n",
        "line 10: batch.microbatch: not used with task.trainer_script: the batch is the trainer's arguments",
    ),
    "variants": (
        GOOD + '\n[[variants]]\nid = "bf16"\nprecision = "bf16"\n',
        "variants[0].precision: a captured trainer's variant changes microbatch, accumulation or "
        'activation_checkpointing in place, or the script\'s args / env (a fresh capture: e.g. args = ["--bf16"]',
    ),
    "variant args repeating task.args": (
        GOOD + '\n[[variants]]\nid = "bf16"\nargs = ["--model", "m", "--do_train", "--bf16"]\n',
        "line 11: variants[0].args: is appended to task.args (the last occurrence of a flag wins)",
    ),
    "variant args a string": (
        GOOD + '\n[[variants]]\nid = "bf16"\nargs = "--bf16"\n',
        "line 11: variants[0].args: expected an array, got string '--bf16'",
    ),
    "variant env name": (
        GOOD + '\n[[variants]]\nid = "e"\nenv = { "2X" = "1" }\n',
        "line 11: variants[0].env: '2X' is not a valid environment variable name",
    ),
    "variant empty args": (
        GOOD + '\n[[variants]]\nid = "none"\nargs = []\n',
        "variants[0]: variant 'none' changes nothing",
    ),
    "variant args elsewhere": (
        GOOD.replace('trainer_script = "train.py"', 'builtin = "instruct"')
        .replace("args = [", "#")
        .replace("env = {", "#")
        + '\n[batch]\nmicrobatch = 2\nupdates = 4\n[[variants]]\nid = "v"\nmicrobatch = 1\nargs = ["--bf16"]\n',
        "variants[0].args: only a task.trainer_script's variant takes command-line arguments",
    ),
    "fit search max lengths": (
        GOOD + "\n[fit_search]\nmicrobatches = [1, 2]\nmax_lengths = [64]\n",
        "line 11: fit_search.max_lengths: not used with task.trainer_script: the script tokenises",
    ),
    "empty variant": (GOOD + '\n[[variants]]\nid = "same"\n', "variants[0]: variant 'same' changes nothing"),
    "env name": (
        GOOD.replace("TOKENIZERS_PARALLELISM", '"1BAD"'),
        "line 7: task.env: '1BAD' is not a valid environment variable name",
    ),
    "env value": (
        GOOD.replace('"false"', "1"),
        "task.env.TOKENIZERS_PARALLELISM: expected a string, got number 1",
    ),
    "args type": (GOOD.replace('"--do_train"', "3"), "line 6: task.args[2]: expected a string, got number 3"),
    "not python": (
        GOOD.replace("train.py", "campaign.toml"),
        "line 5: task.trainer_script: 'campaign.toml' is not a Python program",
    ),
    "module name": (
        GOOD.replace('trainer_script = "train.py"', 'trainer_module = "trl/scripts/sft.py"'),
        "task.trainer_module: a module name as `python -m` takes it",
    ),
    "script and module": (
        GOOD.replace('trainer_script = "train.py"', 'trainer_script = "train.py"\ntrainer_module = "a.b"'),
        "task: set exactly one of",
    ),
    "with file": (GOOD + 'file = "task.py"\n', "line 4: task: set exactly one of task.builtin or task.file"),
    "distributed fsdp": (
        GOOD + '\n[distributed]\nstrategy = "fsdp"\nnproc_per_node = 2\n',
        "line 10: distributed.strategy: a captured trainer shards as its TrainingArguments say (--fsdp",
    ),
    "distributed checkpoint": (
        GOOD + '\n[distributed]\nstrategy = "ddp"\ncheckpoint = "full"\n',
        "line 11: distributed.checkpoint: not used with task.trainer_script: the trainer's own checkpoint",
    ),
    "distributed fresh variant": (
        GOOD + '\n[distributed]\nstrategy = "ddp"\n\n[[variants]]\nid = "bf16"\nargs = ["--bf16"]\n',
        "variants[0].args: a fresh-capture variant runs in one process of its own, not on the [distributed]",
    ),
    "distributed nodes": (
        GOOD + '\n[distributed]\nstrategy = "ddp"\nnnodes = 2\nrdzv_endpoint = "h:1"\n',
        "line 11: distributed.nnodes: not used with task.trainer_script: a captured trainer runs on one node",
    ),
    "args elsewhere": (
        GOOD.replace('trainer_script = "train.py"', 'builtin = "instruct"')
        + "\n[batch]\nmicrobatch = 2\nupdates = 4\n",
        "line 6: task.args: only a task.trainer_script takes command-line arguments",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_mistakes_are_one_line_naming_key_and_line(tmp_path, case):
    text, fragment = CASES[case]
    path = _write(tmp_path, text)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    assert fragment in message, message


def test_a_missing_script_is_named(tmp_path):
    path = _write(tmp_path, GOOD, script=False)
    with pytest.raises(SpecError, match=r"line 5: task.trainer_script: no such file 'train.py'"):
        load_spec(path)


def test_the_plan_reads_a_trainer_campaigns_batch_from_the_record(tmp_path):
    """The file's batch is placeholders: the plan takes the trainer's own from `accounting`,
    and ignores what is not a count (a hand-edited record)."""
    from pilot_tui.analysis.plan.inputs import spec_of

    _write(tmp_path, GOOD)
    accounting = {"microbatch": 4, "accumulation": 2, "hold": "epochs", "updates": 11, "epochs": 1.0}
    record = {"campaign": {"spec_text": GOOD, "spec_path": str(tmp_path / "campaign.toml")}}
    b = spec_of(record | {"accounting": accounting | {"drop_last": False}}).batch
    assert (b.microbatch, b.accumulation, b.hold, b.updates, b.epochs, b.drop_last) == (
        4,
        2,
        "epochs",
        11,
        1,
        False,
    )
    hostile = {"microbatch": True, "accumulation": "2", "hold": "days", "updates": -3, "epochs": 0.5}
    assert spec_of(record | {"accounting": hostile}).batch == spec_of(record).batch


def test_a_console_command_or_a_module_is_a_program_as_the_user_launches_it(tmp_path):
    """Twins of the mistakes above: a file pip wrote for a console command (no .py, a python
    shebang), named by its path; a module `python -m` runs."""
    command = tmp_path / "bin" / "tinytrain"
    command.parent.mkdir()
    command.write_text("#!/usr/bin/env python3\nfrom tinytrain.cli import main\n")
    spec = load_spec(_write(tmp_path, GOOD.replace("train.py", "bin/tinytrain"))).spec
    assert spec.task.program == "bin/tinytrain" and spec.task.captures_trainer
    module = GOOD.replace('trainer_script = "train.py"', 'trainer_module = "trl.scripts.sft"')
    spec = load_spec(_write(tmp_path, module)).spec
    assert spec.task.program == "-m trl.scripts.sft" and spec.task.captures_trainer
