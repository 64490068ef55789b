"""`pilot-tui init --model DIR --data FILE.jsonl`: a runnable, commented campaign for a local
Hugging Face model and a JSONL file (R21).

It inspects the model directory (config, tokenizer, chat template, weights) and the data (rows,
fields, format, token lengths) and writes every section with a value and a comment saying where
the value came from. Nothing is loaded from a hub; the model's weights are not loaded at all.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from ..core.atomic import write_text_atomic
from ..tasks import hf_chat, hf_model
from ..tasks.hf_data import (
    TRAIN_ON,
    ChatLayout,
    DataError,
    chat_turns,
    detect_format,
    detect_group_field,
    read_jsonl,
)

# The percentile of token lengths max_length covers: a few outliers must not set the memory bill.
LENGTH_PERCENTILE = 99
TARGET_EFFECTIVE_BATCH = 16
REPLAY_INPUTS = 3
# Below this many weight bytes the model is a toy or from-scratch model: a high overfit LR.
SMALL_MODEL_BYTES = 200 * 2**20


class InitError(ValueError):
    """`init` cannot write a campaign; one line naming the file (exit code 2)."""


@dataclass
class Findings:
    """What `init` saw, each figure with the sentence that explains it in the campaign."""

    task: str
    options: dict[str, Any]
    rows: int
    lengths: list[int] = field(default_factory=list)
    group_field: str = ""
    replays: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    weight_bytes: int = 0
    num_labels: int = 0


def _literal(value: Any) -> str:
    """A one-line TOML literal (arrays and tables inline), so each value keeps its comment."""
    if isinstance(value, Mapping):
        items = ", ".join(f"{_key(k)} = {_literal(v)}" for k, v in value.items())
        return f"{{ {items} }}" if items else "{}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return tomli_w.dumps({"v": value}).strip().removeprefix("v = ")


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _literal(key)


def percentile(values: Sequence[int], q: float) -> int:
    ordered = sorted(values)
    k = max(0, math.ceil(q / 100 * len(ordered)) - 1)
    return ordered[k]


def _round_up(x: int, to: int = 8) -> int:
    return max(to, -(-x // to) * to)


def _is_classifier(config: Mapping[str, Any], rows: Sequence[tuple[int, Mapping[str, Any]]]) -> bool:
    archs = " ".join(config.get("architectures") or [])
    _, first = rows[0]
    return "ForSequenceClassification" in archs or (
        "label" in first and "text" in first and "messages" not in first
    )


def inspect_inputs(
    model_dir: Path, data: Path, *, fmt: str = "", train_on: str = "assistant", fresh_init: bool = False
) -> Findings:
    """Read the model directory and the data; measure token lengths with the task's own encoders."""
    config = hf_model.check_model_dir(model_dir, fresh_init)
    rows = read_jsonl(data)
    tok = hf_model.load_tokenizer(model_dir)
    hf_model.ensure_pad(tok)
    weight_bytes = sum(p.stat().st_size for p in hf_model.weight_files(model_dir))
    if _is_classifier(config, rows):
        return _classifier_findings(model_dir, data, config, rows, tok, weight_bytes)
    detected, layout_options = detect_format(rows)
    fmt = fmt or detected
    if not fmt:
        _, first = rows[0]
        raise InitError(
            f"{data}: line {rows[0][0]}: no known format (fields: {', '.join(sorted(first))}); expected "
            "'messages' (or ShareGPT 'conversations'), 'prompt' + 'completion', 'text', or 'text' + 'label'"
        )
    if train_on not in TRAIN_ON:
        raise InitError(f"--train-on must be one of {', '.join(TRAIN_ON)}")
    options: dict[str, Any] = {"format": fmt, "train_on": train_on} | layout_options
    found = Findings("hf_causal_lm", options, len(rows), weight_bytes=weight_bytes)
    eos = tok.eos_token_id
    if fmt == "messages":
        if not hf_chat.template_of(tok):
            raise InitError(
                f"{model_dir}: the tokenizer has no chat template, so chat data cannot be rendered"
            )
        layout = ChatLayout(
            layout_options.get("messages_field", "messages"),
            layout_options.get("role_key", "role"),
            layout_options.get("content_key", "content"),
            layout_options.get("roles"),
        )
        unlocated = 0
        for number, obj in rows:
            turns = chat_turns(data, number, obj, layout)
            enc = hf_chat.encode_chat(tok, turns, train_on)
            unlocated += bool(enc.problem)
            found.lengths.append(len(enc.ids))
            if len(found.replays) < REPLAY_INPUTS:
                first_user = next((t["content"] for t in turns if t["role"] == "user"), "")
                if first_user and first_user not in found.replays:
                    found.replays.append(first_user)
        how = (
            "its assistant mask ({% generation %})"
            if hf_chat.has_generation_markers(tok)
            else ("rendering turn by turn and aligning offsets (no generation markers)")
        )
        found.notes.append(f"chat template found; assistant turns located through {how}")
        if unlocated:
            found.notes.append(
                f"WARNING: the assistant turns of {unlocated} of {len(rows)} conversations cannot be located: "
                "inspect will fail on them"
            )
        if layout_options:
            found.notes.append("ShareGPT data: roles human/gpt are mapped to user/assistant (declared below)")
    else:
        if eos is None:
            raise InitError(f"{model_dir}: the tokenizer has no eos token")
        key = "prompt" if fmt == "prompt_completion" else "text"
        for number, obj in rows:
            if not isinstance(obj.get(key), str):
                raise InitError(f"{data}: line {number}: missing text field {key!r}")
            if fmt == "prompt_completion":
                if not isinstance(obj.get("completion"), str):
                    raise InitError(f"{data}: line {number}: missing text field 'completion'")
                enc = hf_chat.encode_prompt_completion(tok, obj["prompt"], obj["completion"], eos, train_on)
            else:
                enc = hf_chat.encode_text(tok, obj["text"], eos)
            found.lengths.append(len(enc.ids))
            if len(found.replays) < REPLAY_INPUTS:
                text = obj[key] if fmt == "prompt_completion" else " ".join(obj[key].split()[:8])
                if text not in found.replays:
                    found.replays.append(text)
    found.group_field = detect_group_field(rows)
    return found


def _classifier_findings(model_dir, data, config, rows, tok, weight_bytes) -> Findings:
    id2label = config.get("id2label") or {}
    names = [str(v) for _, v in sorted(((int(k), v) for k, v in id2label.items()))]
    options: dict[str, Any] = {"text_field": "text", "label_field": "label"}
    _, first = rows[0]
    if isinstance(first.get("label"), int):
        name_col = next((c for c in ("label_name", "label_text", "class_name") if c in first), "")
        if name_col:
            options["name_field"] = name_col
    found = Findings("hf_sequence_classification", options, len(rows), weight_bytes=weight_bytes)
    found.num_labels = len(names)
    for number, obj in rows:
        if not isinstance(obj.get("text"), str):
            raise InitError(f"{data}: line {number}: missing text field 'text'")
        if "label" not in obj:
            raise InitError(f"{data}: line {number}: missing field 'label'")
        found.lengths.append(len(tok(obj["text"], add_special_tokens=True)["input_ids"]))
        if len(found.replays) < REPLAY_INPUTS and obj["text"] not in found.replays:
            found.replays.append(obj["text"])
    if names and all(re.fullmatch(r"LABEL_\d+", n) for n in names):
        found.notes.append(
            "WARNING: the config's id2label holds default names (LABEL_0, …): name your classes in "
            "config.json, or inspect cannot tell a shuffled mapping"
        )
    found.group_field = detect_group_field(rows)
    return found


def _batch(rows: int, split_train: float) -> tuple[int, int]:
    """(microbatch, accumulation): the target effective batch, smaller when the data is small, so
    an epoch still holds a few updates."""
    train = max(1, int(rows * split_train))
    effective = TARGET_EFFECTIVE_BATCH
    while effective > 1 and train // effective < 4:
        effective //= 2
    microbatch = min(4, effective)
    return microbatch, effective // microbatch


def render(
    found: Findings,
    *,
    model_dir: Path,
    data: Path,
    out: Path,
    name: str,
    lr: float,
    lora: bool,
    fresh_init: bool,
    bf16: bool,
) -> str:
    """The campaign's text: every section filled and commented."""
    rel = lambda p: os.path.relpath(p.resolve(), out.resolve().parent)  # noqa: E731
    lengths = found.lengths
    longest = max(lengths)
    p = percentile(lengths, LENGTH_PERCENTILE)
    max_length = _round_up(p)
    cut = sum(1 for n in lengths if n > max_length)
    microbatch, accumulation = _batch(found.rows, 0.8)
    effective = microbatch * accumulation
    per_epoch = max(1, int(found.rows * 0.8) // effective)
    small = found.weight_bytes < SMALL_MODEL_BYTES
    overfit_lr = 3e-3 if small or fresh_init else max(lr * 5, 1e-4)
    task_options = {"model": rel(model_dir), "data": rel(data)} | found.options
    if found.group_field:
        task_options["group_field"] = found.group_field
    if fresh_init:
        task_options["fresh_init"] = True
    if lora:
        task_options["lora"] = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
    requires = ["transformers", "tokenizers"] + (["peft"] if lora else [])
    classifier = found.task == "hf_sequence_classification"
    train_on = found.options.get("train_on", "")
    lines = [
        f"# Written by `pilot-tui init` from {rel(model_dir)} and {rel(data)}.",
        "# Every value below was measured or chosen for this model and data; edit freely, then",
        f"#   pilot-tui run {out.name} --headless      (or open it in the dashboard: pilot-tui {out.name})",
        "",
        "[campaign]",
        f"name = {_literal(name)}",
        f"description = {_literal(f'{found.task} on {data.name} ({found.rows} rows)')}",
        "",
        "[task]",
        f"builtin = {_literal(found.task)}",
        "# model and data are relative to this file; the model loads with local_files_only (no hub).",
        f"options = {_literal(task_options)}",
    ]
    for note in found.notes:
        lines.append(f"# {note}")
    if found.group_field:
        lines.append(f"# Leakage unit: rows sharing {found.group_field!r} stay in one split.")
    else:
        lines.append(
            "# No group field recognised: each row is its own group (add task.options.group_field if"
        )
        lines.append("# rows of one conversation, document or patient must stay in one split).")
    lines += [f"requires = {_literal(requires)}   # imported for real by the stack phase"]
    if not classifier:
        why = (
            "train_on = 'all' supervises the prompt too"
            if train_on == "all"
            else (
                "plain text has no prompt"
                if found.options.get("format") == "text"
                else "only replies are supervised"
            )
        )
        lines.append(f"supervise_prompt = {_literal(train_on == 'all')}   # {why}")
    lines += [
        "",
        "[split]",
        "train = 0.8",
        "validation = 0.1",
        "test = 0.1",
        "seed = 0",
        "",
        "[batch]",
        f"# {effective} examples per update = microbatch {microbatch} × accumulation {accumulation} on one GPU.",
        f"microbatch = {microbatch}",
        f"accumulation = {accumulation}",
        "replicas = 1",
        f"# max_length: the {LENGTH_PERCENTILE}th percentile of the token lengths ({p}), rounded up to a multiple",
        f"# of 8; it cuts {cut} of {found.rows} examples (the longest has {longest} tokens).",
        f"max_length = {max_length}",
        'precision = "fp32"              # bf16 is measured as a variant below where the stack allows it',
        "drop_last = true",
        'hold = "epochs"',
        "epochs = 1",
        'device = "auto"',
        "",
        "[optim]",
        f"lr = {_literal(lr)}",
        "weight_decay = 0.0",
        f"warmup_updates = {min(10, max(1, per_epoch // 10))}",
        'schedule = "cosine"',
        "grad_clip = 1.0",
        "seed = 0",
        "",
        "[phases]",
        "steady_updates = 10",
        "",
        "[replay]",
        "# Taken from the data: replayed greedily (until the end-of-turn token) before the export and",
        "# after the reload in a fresh process; the outputs must match.",
        f"inputs = {_literal(found.replays)}",
        "",
        "[inspect]",
        "examples = 4",
        "",
        "[overfit]",
        "# A tiny subset must be learnt: mechanics, not generalisation. Recovery is judged against what",
        "# the subset allows (identical contexts with different next tokens cannot all be recovered).",
        "examples = 8",
        f"max_steps = {200 if small or fresh_init else 100}",
        f"loss_below = {0.1 if classifier else 0.05}",
        "recover = 1.0",
        f"lr = {_literal(overfit_lr)}",
        "",
        "# Memory variants, each measured in the same loop as the control (R11).",
        "[[variants]]",
        'id = "mb1"',
        "microbatch = 1                  # accumulation rises to keep the effective batch",
        "",
        "[[variants]]",
        'id = "ckpt"',
        "activation_checkpointing = true # the model's own gradient checkpointing",
    ]
    if microbatch == 1:
        lines[lines.index('id = "mb1"') - 1 : lines.index('id = "mb1"') + 3] = []
    if bf16:
        lines += [
            "",
            "[[variants]]",
            'id = "bf16"',
            'precision = "bf16"              # this machine supports bf16',
        ]
    else:
        lines += [
            "",
            "# bf16 is not natively supported here; on a GPU that has it, add:",
            "# [[variants]]",
            '# id = "bf16"',
            '# precision = "bf16"',
        ]
    lines += [
        "",
        "[lr_board]",
        f"control = {_literal(lr)}",
        f"variants = {_literal([lr / 2, lr * 2])}   # around the given LR: illustrations, not advice",
        "seeds = [0]",
        f"updates = {min(200, max(10, 2 * per_epoch))}",
        f"validate_every = {max(1, min(20, per_epoch))}",
        "",
        "[lr_board.stop]",
        "non_finite = true",
        "explosion_factor = 4.0",
        "",
        "[resume]",
        f"# {per_epoch} updates per epoch: resuming at k and training n more crosses the epoch boundary.",
        f"k = {max(1, per_epoch - 1)}",
        "n = 2",
        "tolerance = 0.0",
        "",
        "[plan]",
        f"dataset_size = {found.rows}          # the full dataset the rental will train on",
        "epochs = 3",
        f"priority = {_literal(['control', *(['mb1'] if microbatch > 1 else []), 'ckpt'])}",
        f"expected_result = {_literal('validation loss below the pilot' + chr(39) + 's; replayed replies unchanged after reload')}",
    ]
    return "\n".join(lines) + "\n"


def _bf16_native() -> bool:
    try:
        import torch  # the only use of torch in the commands: whether this machine has bf16

        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    except Exception:
        return False


def init_campaign(
    model: Path,
    data: Path,
    out: Path,
    *,
    fmt: str = "",
    train_on: str = "assistant",
    lr: float = 0.0,
    lora: bool = False,
    fresh_init: bool = False,
    force: bool = False,
) -> tuple[Path, Findings]:
    """Write the campaign; refuse to overwrite a file unless `force`."""
    if out.exists() and not force:
        raise InitError(f"{out}: already exists (use --force to overwrite)")
    with hf_model.quiet():
        found = inspect_inputs(model, data, fmt=fmt, train_on=train_on, fresh_init=fresh_init)
    # A toy or from-scratch model learns at a far higher LR than a pretrained one fine-tuned.
    small = found.weight_bytes < SMALL_MODEL_BYTES
    lr = lr or (2e-4 if lora else (1e-3 if fresh_init or small else 2e-5))
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{model.resolve().name}-{data.stem}").strip("-") or "campaign"
    text = render(
        found,
        model_dir=model,
        data=data,
        out=out,
        name=name,
        lr=lr,
        lora=lora,
        fresh_init=fresh_init,
        bf16=_bf16_native(),
    )
    try:
        write_text_atomic(out, text)
    except OSError as exc:
        raise InitError(f"{out}: cannot write the campaign: {exc.strerror or exc}") from None
    return out, found


def main(args: Any) -> int:
    """The `init` subcommand; returns the exit code."""
    if not (args.model and args.data) or args.script_args or args.env:
        print(
            "pilot-tui: error: init needs --model DIR and --data FILE.jsonl, or --trainer SCRIPT -- ARGS",
            file=sys.stderr,
        )
        return 2
    try:
        path, found = init_campaign(
            args.model,
            args.data,
            args.out,
            fmt=args.format or "",
            train_on=args.train_on,
            lr=args.lr or 0.0,
            lora=args.lora,
            fresh_init=args.fresh_init,
            force=args.force,
        )
    except (InitError, DataError) as exc:
        print(f"pilot-tui: error: {exc}", file=sys.stderr)
        return 2
    p = percentile(found.lengths, LENGTH_PERCENTILE)
    print(f"wrote {path}: {found.task}, {found.rows} rows, max_length {_round_up(p)} (p{LENGTH_PERCENTILE})")
    print(f"next: pilot-tui run {path} --headless   (or: pilot-tui {path})")
    return 0
