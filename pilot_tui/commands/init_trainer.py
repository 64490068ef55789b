"""`pilot-tui init --trainer train.py -- ARGS`: a runnable, commented campaign that pilots a
Hugging Face `Trainer` / TRL `SFTTrainer` script unchanged (`[task] trainer_script`, `args`).

The script is read, never run: its syntax, its imports (the stack phase's `requires`), whether it
calls `.train(` and trains only under `--do_train`. The arguments are what the user would type
after `python train.py`; paths among them that exist are rewritten relative to the campaign's
folder (the runner starts the script there), and a JSONL data file among them gives the plan's
dataset size and the prompts to replay. Nothing is imported or loaded.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.launch import command_changes, find_command, runs_python
from ..core.spec import SpecError, load_spec
from ..tasks.hf_data import DataError, read_jsonl
from ..tasks.hf_model import weight_files
from .init import _literal

REPLAY_INPUTS = 3
# Below this many weight bytes the model is a toy or from-scratch model: a high overfit LR.
SMALL_MODEL_BYTES = 200 * 2**20
# The flag HfArgumentParser scripts (the HF examples) train under; `TrainingArguments.do_train`
# defaults to False, so without it such a script never calls `train()`.
DO_TRAIN = "--do_train"
# Such a script builds its eval set only under --do_eval; the split and eval_longest gates need it.
DO_EVAL = "--do_eval"
EPOCH_FLAGS = ("--num_train_epochs", "--epochs")
MICROBATCH_FLAGS = ("--per_device_train_batch_size", "--batch_size")
CHECKPOINTING_FLAGS = ("--gradient_checkpointing", "--activation_checkpointing")
LR_FLAGS = ("--learning_rate", "--lr")
SEED_FLAGS = ("--seed",)
# `TrainingArguments.seed` when the command line gives none (TRL's configs and LLaMA-Factory keep it).
DEFAULT_SEED = 42
FALSE = ("false", "0", "no")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class TrainerInitError(ValueError):
    """`init --trainer` cannot write a campaign; one line naming the file (exit code 2)."""


@dataclass
class ScriptFindings:
    """What `init --trainer` read, each with the sentence that explains it in the campaign."""

    script: Path  # the file read: the script, or the module a console command or `-m` runs
    args: list[str]  # as the campaign holds them: paths relative to the campaign's folder
    given: list[str] = field(default_factory=list)  # the arguments as the user typed them
    program: str = ""  # as written in the campaign: a path, a console command's name
    module: str = ""  # `python -m module`
    console: bool = False  # a package's console command: a wrapper around its entry point
    lr_from: str = ""  # where the LR was read: the command line or a config file
    config_lr: float = 0.0
    config_seed: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    requires: list[str] = field(default_factory=list)
    trainers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: Path | None = None
    rows: int = 0
    replays: list[str] = field(default_factory=list)
    plain_text: bool = False  # the data is bare text: every token is learnt, no prompt to mask
    classifier: str = ""  # "sequence classifier" / "token classifier": the model class it builds
    model_dir: Path | None = None
    weight_bytes: int = 0
    epochs: int = 1


def _tree(script: Path) -> ast.Module:
    if not script.is_file():
        what = "is a directory, not a script" if script.is_dir() else "no such file"
        raise TrainerInitError(f"{script}: {what}")
    if not runs_python(str(script)):
        raise TrainerInitError(
            f"{script}: not a Python program (a .py file, or a console command whose first line runs python)"
        )
    try:
        source = script.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TrainerInitError(
            f"{script}: cannot read the script: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    try:
        return ast.parse(source, filename=str(script))
    except SyntaxError as exc:
        raise TrainerInitError(f"{script}: line {exc.lineno}: {exc.msg}") from None


def _imports(tree: ast.Module, folder: Path) -> list[str]:
    """Top-level third-party modules the script imports (not the standard library, not a module
    beside the script), in first-seen order: what the stack phase must find installed."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            local = (folder / f"{top}.py").exists() or (folder / top / "__init__.py").exists()
            if top not in sys.stdlib_module_names and not local and top not in found:
                found.append(top)
    return found


def _trainer_classes(tree: ast.Module) -> list[str]:
    """`Trainer` classes imported from transformers / trl, and the script's own subclasses."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("transformers", "trl"):
            names += [a.name for a in node.names if a.name.endswith("Trainer")]
        elif isinstance(node, ast.ClassDef) and any(
            (b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "").endswith(
                "Trainer"
            )
            for b in node.bases
        ):
            names.append(node.name)
    return list(dict.fromkeys(names))


def _classifier(tree: ast.Module) -> str:
    """What classifier the script builds, by the model class it names (read, never run)."""
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    if any(n.endswith("ForSequenceClassification") for n in names):
        return "sequence classifier"
    if any(n.endswith("ForTokenClassification") for n in names):
        return "token classifier"
    return ""


def _calls_train(tree: ast.Module) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "train"
        for n in ast.walk(tree)
    )


def _reads(tree: ast.Module, attribute: str) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == attribute for n in ast.walk(tree))


def _is_plain_text(row: dict[str, Any]) -> bool:
    return isinstance(row.get("text"), str) and not any(
        k in row for k in ("messages", "conversations", "prompt", "completion", "label")
    )


def _flag_value(args: Sequence[str], flags: Sequence[str]) -> str:
    for i, a in enumerate(args):
        for flag in flags:
            if a == flag and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(flag + "="):
                return a.split("=", 1)[1]
    return ""


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


def _checkpointing_on(args: Sequence[str]) -> bool:
    """`--gradient_checkpointing` given without a false value (a bare flag means true)."""
    for i, a in enumerate(args):
        name, eq, value = a.partition("=")
        if name.replace("-", "_").lstrip("_") in {f.lstrip("-") for f in CHECKPOINTING_FLAGS}:
            if not eq:
                value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else "true"
            return value.lower() not in FALSE
    return False


def _has_flag(args: Sequence[str], flag: str) -> bool:
    spellings = {flag, flag.replace("_", "-")}
    return any(a in spellings or a.split("=", 1)[0] in spellings for a in args)


def _relocate(token: str, here: Path, folder: Path) -> tuple[str, Path | None]:
    """A relative path that exists from `here` (where init runs), rewritten relative to the
    campaign's `folder`; any other token unchanged. `--key=path` is handled too."""
    prefix, value = "", token
    if token.startswith("-"):
        if "=" not in token:
            return token, None
        prefix, value = token.split("=", 1)
        prefix += "="
    if not value or "\0" in value:
        return token, None
    path = here / value
    try:
        exists = path.exists()
    except OSError:  # a name too long to be a path
        return token, None
    if not exists:
        return token, None
    if os.path.isabs(value):
        return token, path
    # Links kept as the user wrote them (abspath, not resolve): a path through a link stays one.
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(folder))
    return prefix + rel, path


CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


def _config_file(path: Path) -> dict[str, Any] | None:
    """A training config among the args (LLaMA-Factory's YAML, a JSON of TrainingArguments): a
    mapping holding `learning_rate` or `output_dir`; None for anything else (data, a model)."""
    if not path.is_file() or path.suffix not in CONFIG_SUFFIXES:
        return None
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            loaded = json.loads(text)
        else:
            import yaml  # transformers' own dependency: present with the [hf] extra

            loaded = yaml.safe_load(text)
    except Exception:  # not a config we can read: treated as any other file
        return None
    if isinstance(loaded, dict) and ("learning_rate" in loaded or "output_dir" in loaded):
        return loaded
    return None


def _read_config(found: ScriptFindings, config: dict[str, Any], path: Path) -> None:
    lr = config.get("learning_rate")
    if isinstance(lr, int | float | str) and _number(str(lr)) > 0:
        found.config_lr, found.lr_from = _number(str(lr)), f"{path.name}'s learning_rate"
    seed = config.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool):
        found.config_seed = seed


def module_file(module: str) -> Path | None:
    """The file `python -m module` runs, found on this Python's path without importing anything
    (importing a training package would load torch in a command that never needs it)."""
    parts = module.split(".")
    for entry in sys.path:
        base = Path(entry or ".").joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__main__.py"):
            if candidate.is_file():
                return candidate
    return None


CONSOLE_IMPORT = re.compile(r"^from ([\w.]+) import (\w+)", re.MULTILINE)


def resolve_program(program: str | None, module: str | None) -> tuple[Path, str, bool]:
    """(the file to read, the module `-m` runs or '', a console command) for what the user gave."""
    if program and module:
        raise TrainerInitError("give --trainer PROGRAM or --trainer-module MODULE, not both")
    if module:
        found = module_file(module)
        if found is None:
            raise TrainerInitError(f"-m {module}: no such module on this Python's path")
        return found, module, False
    assert program is not None
    path = Path(program)
    if not path.exists() and os.sep not in program:
        command = find_command(program)
        if command is None:
            raise TrainerInitError(f"{program}: no such file, nor a console command of that name")
        path = Path(command)
    if not path.is_file():
        what = "is a directory, not a script" if path.is_dir() else "no such file"
        raise TrainerInitError(f"{program}: {what}")
    if path.suffix == ".py":
        return path, "", False
    if not runs_python(str(path)):
        raise TrainerInitError(
            f"{program}: not a Python program (a .py file, or a console command whose first line runs python)"
        )
    # A console command pip wrote: `from package.module import main`; what it runs is that module.
    try:
        wrapper = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise TrainerInitError(f"{program}: cannot read it: {exc.strerror or exc}") from None
    entry = CONSOLE_IMPORT.search(wrapper)
    target = module_file(entry.group(1)) if entry else None
    return (target or path), "", True


def _json_rows(path: Path) -> list[dict[str, Any]]:
    """The data file's records: JSON lines, or (for .json) one JSON array of objects."""
    if path.suffix == ".json":
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            loaded = None
        if isinstance(loaded, list):
            return [r for r in loaded if isinstance(r, dict)]
    return [obj for _, obj in read_jsonl(path)]


def _replay_of(row: dict[str, Any]) -> str:
    """The prompt part of one example, as the pilot will replay it."""
    messages = row.get("messages") or row.get("conversations")
    if isinstance(messages, list):
        for m in messages:
            if isinstance(m, dict) and m.get("role", m.get("from")) in ("user", "human"):
                content = m.get("content", m.get("value"))
                if isinstance(content, str) and content.strip():
                    return content
        return ""
    for key in ("prompt", "instruction", "question"):
        if isinstance(row.get(key), str) and row[key].strip():
            return row[key]
    if isinstance(row.get("text"), str):
        return " ".join(row["text"].split()[:8])
    return ""


def inspect_script(
    script: Path, args: Sequence[str], out: Path, env: dict[str, str] | None = None
) -> ScriptFindings:
    """Read the script and its arguments; nothing is imported or run."""
    tree = _tree(script)
    here, folder = Path.cwd(), Path(os.path.abspath(out)).parent
    found = ScriptFindings(script=script, args=[], given=list(args), env=dict(env or {}))
    for name, value in found.env.items():
        if not ENV_NAME.fullmatch(name) or "\0" in value:
            raise TrainerInitError(f"--env {name}={value}: not a valid environment variable")
    found.trainers = _trainer_classes(tree)
    found.classifier = _classifier(tree)
    found.requires = _imports(tree, script.resolve().parent)
    moved = []
    for token in args:
        new, path = _relocate(token, here, folder)
        found.args.append(new)
        if new != token:
            moved.append(f"{token} -> {new}")
        if path is None:
            continue
        config = _config_file(path)
        if config is not None:
            _read_config(found, config, path)
            continue
        if path.is_dir() and (path / "config.json").is_file() and found.model_dir is None:
            found.model_dir = path
            found.weight_bytes = sum(p.stat().st_size for p in weight_files(path))
        elif path.is_file() and path.suffix in (".jsonl", ".json") and found.data is None:
            rows = _json_rows(path)
            if rows:
                found.data, found.rows = path, len(rows)
                found.plain_text = _is_plain_text(rows[0])
                for row in rows:
                    text = _replay_of(row)
                    if text and text not in found.replays:
                        found.replays.append(text)
                    if len(found.replays) >= REPLAY_INPUTS:
                        break
    if moved:
        found.notes.append(
            f"paths in args rewritten relative to this file's folder (the script starts there): {', '.join(moved)}"
        )
    if not _calls_train(tree) and not found.console:
        found.notes.append(
            "WARNING: no `.train(` call found in the script; the pilot captures the trainer at its first "
            "Trainer.train() and fails the load gate if the script never calls it"
        )
    if _reads(tree, "do_train") and not _has_flag(found.args, DO_TRAIN):
        found.args.append(DO_TRAIN)
        found.notes.append(
            f"{DO_TRAIN} added: the script reads training_args.do_train (False by default) and trains only under it"
        )
    if _reads(tree, "do_eval") and not _has_flag(found.args, DO_EVAL):
        found.args.append(DO_EVAL)
        found.notes.append(
            f"{DO_EVAL} added: the script builds its eval set only under it (the split and eval_longest gates use it)"
        )
    if _reads(tree, "eval_strategy") and not _has_flag(found.args, "--eval_strategy"):
        found.notes.append(
            "the script may pass an eval_dataset only when eval_strategy is not 'no' (its default): add "
            "'--eval_strategy', 'steps' to args for the split and eval_longest gates"
        )
    epochs = _flag_value(found.args, EPOCH_FLAGS)
    try:
        found.epochs = max(1, math.ceil(float(epochs))) if epochs else 1
    except ValueError:
        found.epochs = 1
    return found


def _variant_lines(found: ScriptFindings) -> list[str]:
    """Memory variants (what trainer.args takes in place) and, when the LR is among the args (or
    in the config file they name), an LR board around it. The script's own batch is unknown until it runs: a variant that turns out
    to be the control's configuration is measured again, harmless."""
    args = found.args
    lines = ["", "# Memory variants, each measured by changing the captured trainer.args in place (R11)."]
    microbatch = _flag_value(args, MICROBATCH_FLAGS)
    if _number(microbatch) != 1:
        lines += [
            "[[variants]]",
            'id = "mb1"',
            "microbatch = 1                  # accumulation rises to keep the effective batch",
            "",
        ]
    if not _checkpointing_on(args):
        lines += [
            "[[variants]]",
            'id = "ckpt"',
            "activation_checkpointing = true # the model's own gradient checkpointing",
        ]
    else:
        lines.append("# (no checkpointing variant: the args already turn it on)")
    lines += [
        "",
        "# The largest microbatch that fits, each tried by changing trainer.args in place (microbatches",
        "# only: the script fixes the max length and the precision):",
        "# [fit_search]",
        "# microbatches = [1, 2, 4, 8]",
    ]
    lr = _number(_flag_value(args, LR_FLAGS))
    lr_from = "the script's --learning_rate"
    if lr <= 0 and found.config_lr > 0:
        lr, lr_from = found.config_lr, f"the script's {found.lr_from}"
    given = _flag_value(args, SEED_FLAGS)
    seed = int(given) if re.fullmatch(r"-?\d+", given or "") else DEFAULT_SEED
    whence = "the script's --seed" if given else "TrainingArguments' default seed (no --seed given)"
    if not given and found.config_seed is not None:
        seed, whence = found.config_seed, "the seed of the script's config file"
    lines.append("")
    if lr > 0:
        lines += [
            "# LR runs through args.learning_rate: each the script's own train() from the captured weights.",
            "[lr_board]",
            f"control = {_literal(lr)}             # {lr_from}",
            f"variants = {_literal([lr / 2, lr * 2])}   # around it: illustrations, not advice",
            f"seeds = [{seed}]                  # {whence}: each run draws the real run's data order",
            "updates = 20",
            "validate_every = 10",
        ]
    else:
        lines += [
            "# An LR board runs through args.learning_rate; set control to the script's LR to add one:",
            "# [lr_board]",
            "# control = 2e-5",
            "# variants = [1e-5, 4e-5]",
            "# updates = 20",
            "# validate_every = 10",
        ]
    return lines


def program_lines(found: ScriptFindings) -> list[str]:
    """The program as the user launches it, written as they gave it (links kept)."""
    if found.module:
        return [f"trainer_module = {_literal(found.module)}   # run as `python -m {found.module}`"]
    where = "a console command" if found.console else "the script"
    if os.path.isabs(found.program) or os.sep not in found.program:
        how = "found beside this Python or on PATH" if not os.path.isabs(found.program) else "as given"
        return [f"trainer_script = {_literal(found.program)}   # {where}, {how}"]
    return [f"trainer_script = {_literal(found.program)}   # {where}, relative to this file"]


def render_trainer(found: ScriptFindings, *, out: Path, name: str) -> str:
    """The campaign's text: what the pilot needs beside the script, each value commented."""
    folder = Path(os.path.abspath(out)).parent
    script = found.program
    small = found.model_dir is None or found.weight_bytes < SMALL_MODEL_BYTES
    trainers = ", ".join(found.trainers) or "a transformers Trainer"
    lines = [
        f"# Written by `pilot-tui init --trainer` from {script}.",
        "# The script runs unchanged, as `python SCRIPT ARGS...` in this file's folder, up to its first",
        "# `trainer.train()`; the pilot then runs every gate on that trainer (docs/trainer.md). Its batch,",
        "# optimizer, schedule and splits are the script's own: set them in `args`, not here. Then",
        f"#   pilot-tui run {out.name} --headless      (or open it in the dashboard: pilot-tui {out.name})",
        "",
        "[campaign]",
        f"name = {_literal(name)}",
        f"description = {_literal(f'{Path(script).name} ({trainers}) piloted unchanged')}",
        "",
        "[task]",
        *program_lines(found),
        "# What you would type after the program; edit it as you would the command line.",
        f"args = {_literal(found.args)}",
    ]
    if found.given != found.args:
        lines.append(
            f"given_args = {_literal(found.given)}   # as you typed them: the load row says what differs"
        )
    if found.env:
        lines.append(f"env = {_literal(found.env)}   # set before the script runs")
    else:
        lines.append('# env = { CUDA_VISIBLE_DEVICES = "0" }   # environment variables the script reads')
    for note in found.notes:
        lines.append(f"# {note}")
    if found.requires:
        lines.append(
            f"requires = {_literal(found.requires)}   # the script's imports, checked by the stack phase"
        )
    if found.classifier:
        lines.append(
            f"# a {found.classifier}: each row's class is its target, there is no prompt to mask "
            "(supervise_prompt does not apply)"
        )
    elif found.plain_text:
        lines.append("supervise_prompt = true         # bare text: every token is learnt, there is no prompt")
    else:
        lines.append(
            "supervise_prompt = false        # the prompt is context: inspect fails a batch that learns it"
        )
    lines += [
        "",
        "[phases]",
        "steady_updates = 10             # optimizer steps of the script's own train() timed as the steady state",
        "",
        "[inspect]",
        "examples = 4                    # batches from the trainer's own dataloader (its collator), token by token",
        "",
        "[overfit]",
        "# training_step (the script's loss and normaliser) on a tiny subset must learn it: mechanics, not",
        "# generalisation.",
        "examples = 8",
        f"max_steps = {200 if small else 100}",
        "loss_below = 0.05",
        "recover = 1.0",
        f"lr = {_literal(3e-3 if small else 1e-4)}   # {'a small or unknown model' if small else 'a pretrained model'}",
        "",
        "[resume]",
        "# The script's own checkpoint at step k, resumed by a new process: steps k+1..k+n must match.",
        "k = 2",
        "n = 2",
        "tolerance = 0.0",
    ]
    lines += _variant_lines(found)
    lines += [
        "",
        "[replay]",
    ]
    if found.replays:
        source = os.path.relpath(found.data.resolve(), folder) if found.data else "the data"
        lines += [
            f"# Prompts taken from {source}: replayed greedily before the export and after the",
            "# reload in a fresh process; the outputs must match.",
            f"inputs = {_literal(found.replays)}",
        ]
    else:
        lines += [
            "# No JSONL data file among the args: add prompts to replay before the export and after the reload.",
            "inputs = []",
        ]
    lines += ["", "[plan]"]
    if found.rows:
        lines.append(
            f"dataset_size = {found.rows}          # rows of {found.data.name if found.data else 'the data'}"
        )
    else:
        lines.append("# dataset_size = 100000          # the full dataset the rental will train on")
    why = "from the script's args" if _flag_value(found.args, EPOCH_FLAGS) else "edit to the rental's"
    lines += [
        f"epochs = {found.epochs}                      # {why}",
        f"expected_result = {_literal('validation loss below the pilot' + chr(39) + 's; replayed replies unchanged after reload')}",
    ]
    return "\n".join(lines) + "\n"


def init_trainer_campaign(
    program: str | None,
    args: Sequence[str],
    out: Path,
    *,
    env: dict[str, str] | None = None,
    force: bool = False,
    module: str | None = None,
) -> tuple[Path, ScriptFindings]:
    """Write the campaign, checked first by the code `run` reads it with; refuse to overwrite a
    file unless `force`."""
    if out.exists() and not force:
        raise TrainerInitError(f"{out}: already exists (use --force to overwrite)")
    script, module_name, console = resolve_program(program, module)
    found = inspect_script(script, args, out, env)
    found.module, found.console = module_name, console
    if not module_name:
        found.program = written_path(str(program), out)
    stem = module_name.rsplit(".", 1)[-1] if module_name else Path(str(program)).stem
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-") or "trainer"
    text = render_trainer(found, out=out, name=name)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        try:
            load_spec(tmp)  # what `run` will refuse is refused here, before the file exists
        except SpecError as exc:
            raise TrainerInitError(str(exc).replace(str(tmp), str(out))) from None
        os.replace(tmp, out)
    except OSError as exc:
        raise TrainerInitError(f"{out}: cannot write the campaign: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return out, found


def written_path(program: str, out: Path) -> str:
    """The program as the campaign names it: a console command's name alone stays a name, an
    absolute path stays absolute, a relative one becomes relative to the campaign's folder; links
    are never followed (a path through a link stays one)."""
    if not Path(program).exists() and os.sep not in program:
        return program
    if os.path.isabs(program):
        return program
    return os.path.relpath(os.path.abspath(program), Path(os.path.abspath(out)).parent)


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise TrainerInitError(f"--env {pair}: expected NAME=VALUE")
        env[key] = value
    return env


def main(args: Any) -> int:
    """`init --trainer`; returns the exit code."""
    if args.model or args.data:
        print(
            "pilot-tui: error: --trainer takes the script's own arguments after `--`, not --model/--data",
            file=sys.stderr,
        )
        return 2
    try:
        path, found = init_trainer_campaign(
            args.trainer,
            args.script_args,
            args.out,
            env=parse_env(args.env),
            force=args.force,
            module=args.trainer_module,
        )
    except (TrainerInitError, DataError) as exc:
        print(f"pilot-tui: error: {exc}", file=sys.stderr)
        return 2
    data = f", {found.rows} rows of {found.data.name}" if found.data else ""
    what = f"-m {found.module}" if found.module else found.program
    print(f"wrote {path}: {what} with {len(found.args)} args{data}")
    changed = command_changes(found.given, found.args)
    if changed:
        print("the command piloted differs from yours (the load row says so again):")
        for line in changed:
            print(f"  {line}")
    for note in found.notes:
        if note.startswith("WARNING"):
            print(note)
    print(f"next: pilot-tui run {path} --headless   (or: pilot-tui {path})")
    return 0
