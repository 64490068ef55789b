"""Built-in task `hf_causal_lm`: a local transformers causal LM fine-tuned on JSONL data.

`model` is a local directory (config, tokenizer, weights; `local_files_only` — no hub access,
ever), `data` a JSONL file; both are relative to the campaign file. `format` is `messages`
(chat turns with roles system/user/assistant), `prompt_completion` or `text`; `train_on` is
`assistant` (every assistant turn), `last_assistant` or `all`. What is supervised, and how the
chat template's assistant turns are located: see `hf_chat.py` and docs/hf.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ..analysis import serving
from ..analysis.checks import Check, listing
from ..core.verdict import FAIL, PASS
from . import hf_chat, hf_model
from .contract import CAUSAL_LM, Example, Task
from .hf_data import TRAIN_ON, ChatLayout, DataError, load_lm_examples

# Options holding paths: the loader resolves them against the campaign file's folder.
PATH_OPTIONS = ("model", "data")
AUTO_CLASS = "AutoModelForCausalLM"


def _encode_all(tok: Any, examples: Sequence[Example], fmt: str, train_on: str) -> list[hf_chat.Encoded]:
    eos = tok.eos_token_id
    if fmt != "messages" and eos is None:
        raise DataError("the tokenizer has no eos token: prompt_completion and text data need one to stop")
    out = []
    for ex in examples:
        if fmt == "messages":
            out.append(hf_chat.encode_chat(tok, ex["messages"], train_on))
        elif fmt == "prompt_completion":
            out.append(hf_chat.encode_prompt_completion(tok, ex["prompt"], ex["completion"], eos, train_on))
        else:
            out.append(hf_chat.encode_text(tok, ex["text"], eos))
    return out


def make_collate(encoded: Mapping[int, hf_chat.Encoded], pad_id: int, encode_replay):
    """Right padding; padding gets the ignore index by position (never by token id, so a pad
    token that is also the EOS leaves the real EOS supervised)."""

    def collate(examples: Sequence[Example], max_length: int) -> dict[str, torch.Tensor]:
        rows = [encoded[ex["line"]] if "line" in ex else encode_replay(ex) for ex in examples]
        raw = [len(r.ids) for r in rows]
        cut = [(r.ids[:max_length], r.labels[:max_length]) if max_length else (r.ids, r.labels) for r in rows]
        width = max(1, max(len(ids) for ids, _ in cut))
        input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        labels = torch.full((len(rows), width), hf_chat.IGNORE, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (ids, lab) in enumerate(cut):
            input_ids[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            labels[i, : len(lab)] = torch.tensor(lab, dtype=torch.long)
            mask[i, : len(ids)] = 1
        return {
            "input_ids": input_ids,
            "attention_mask": mask,
            "labels": labels,
            "prompt_length": torch.tensor([r.prompt_length for r in rows]),
            "raw_length": torch.tensor(raw),
        }

    return collate


def forward(model: torch.nn.Module, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """transformers models return an output object: the pilot computes the loss from `.logits`."""
    return model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask")).logits


def location_check(examples: Sequence[Example], encoded: Mapping[int, hf_chat.Encoded]) -> list[Check]:
    """Fail, naming the reason, when assistant turns could not be located in some conversations."""
    bad = [(ex, encoded[ex["line"]].problem) for ex in examples if encoded[ex["line"]].problem]
    if not bad:
        return [Check("assistant_turns", PASS, "the assistant turns of every conversation were located")]
    n = len(examples)
    ids = [f"{ex['id']} (line {ex['line']})" for ex, _ in bad]
    return [
        Check(
            "assistant_turns",
            FAIL,
            f"the assistant turns of {len(bad)} of {n} conversations cannot be located in the chat "
            f"template's tokens ({bad[0][1]}): they would train on nothing — e.g. {listing(ids, len(bad))}",
            len(bad),
            [str(ex["id"]) for ex, _ in bad[:10]],
        )
    ]


def _json(path: Path) -> dict[str, Any] | None:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) else None


def eos_check(model_dir: Path, end_tokens: set[int], decode) -> Check:
    """The tokens that end assistant turns in the template against the EOS ids the model
    directory's generation_config.json (else config.json) makes generation stop at."""
    return serving.eos_check(
        sorted(end_tokens),
        _json(model_dir / "generation_config.json"),
        hf_model.check_model_dir(model_dir, fresh_init=True),
        decode,
    )


def make_task(
    model: str,
    data: str,
    format: str = "messages",
    train_on: str = "assistant",
    messages_field: str = "messages",
    role_key: str = "role",
    content_key: str = "content",
    roles: dict[str, str] | None = None,
    prompt_field: str = "prompt",
    completion_field: str = "completion",
    text_field: str = "text",
    group_field: str = "",
    fresh_init: bool = False,
    attn_implementation: str = "",
    dtype: str = "float32",
    lora: dict[str, Any] | None = None,
    limit: int = 0,
    max_new_tokens: int = 64,
) -> Task:
    """The task from a model directory and a JSONL file (paths already resolved by the loader)."""
    if train_on not in TRAIN_ON:
        raise DataError(f"task.options.train_on must be one of {', '.join(TRAIN_ON)}, got {train_on!r}")
    model_dir, data_path = Path(model), Path(data)
    hf_model.check_model_dir(model_dir, fresh_init)
    layout = ChatLayout(messages_field, role_key, content_key, roles or None)
    examples = load_lm_examples(
        data_path,
        format,
        layout=layout,
        prompt_field=prompt_field,
        completion_field=completion_field,
        text_field=text_field,
        group_field=group_field,
        limit=limit,
    )
    tok = hf_model.load_tokenizer(model_dir)
    pad_note = hf_model.ensure_pad(tok)
    if format == "messages" and not hf_chat.template_of(tok):
        raise DataError(f"{model_dir}: the tokenizer has no chat template, so chat data cannot be rendered")
    encodings = _encode_all(tok, examples, format, train_on)
    encoded = {ex["line"]: e for ex, e in zip(examples, encodings, strict=True)}
    stops = sorted({tok.eos_token_id, *(t for e in encodings for t in e.end_tokens)} - {None})

    def encode_replay(example: Example) -> hf_chat.Encoded:
        ids = example["prompt_ids"]
        return hf_chat.Encoded(list(ids), [hf_chat.IGNORE] * len(ids), len(ids))

    def control(text: str) -> Example:
        if format == "messages":
            ids = hf_chat.chat_prompt(tok, [{"role": "user", "content": text}])
        else:
            ids = [int(i) for i in tok(text, add_special_tokens=True)["input_ids"]]
        return {"id": f"control:{text}", "group": "control", "prompt_ids": ids}

    def build() -> torch.nn.Module:
        return hf_model.load_model(
            model_dir,
            AUTO_CLASS,
            fresh_init=fresh_init,
            attn_implementation=attn_implementation,
            dtype=dtype,
            lora=lora,
        )

    def decode(token: int) -> str:
        return tok.decode([int(token)], skip_special_tokens=False, clean_up_tokenization_spaces=False)

    return Task(
        name=f"hf-causal-lm:{model_dir.name}",
        kind=CAUSAL_LM,
        examples=examples,
        build_model=build,
        collate=make_collate(encoded, int(tok.pad_token_id), encode_replay),
        group_key="group",
        decode_token=decode,
        forward=forward,
        encode_replay=control,
        set_activation_checkpointing=hf_model.set_checkpointing,
        default_max_length=max(len(e.ids) for e in encodings),
        ignore_index=hf_chat.IGNORE,
        pad_id=int(tok.pad_token_id),
        stop_ids=tuple(int(s) for s in stops),
        max_new_tokens=max_new_tokens,
        data_checks=lambda: [
            *location_check(examples, encoded),
            eos_check(model_dir, {t for e in encodings for t in e.end_tokens}, decode),
        ],
        notes=(pad_note, f"labels: {_how(tok, format, train_on)}"),
        stack_check=lambda device, precision: hf_model.check_attention(
            model_dir, AUTO_CLASS, attn_implementation, device, precision
        ),
        export_state=hf_model.adapter_state if lora else None,
        load_export=hf_model.load_adapter if lora else None,
    )


def _how(tok: Any, fmt: str, train_on: str) -> str:
    if fmt == "text":
        return "every token of the text and its EOS"
    if fmt == "prompt_completion":
        return "the completion and its EOS" if train_on != "all" else "every token"
    where = (
        "the template's assistant mask ({% generation %})"
        if hf_chat.has_generation_markers(tok)
        else ("the template rendered turn by turn, aligned by character offsets")
    )
    return f"train_on = {train_on}, assistant turns from {where}, each with its end-of-turn token"
