"""Built-in task `hf_sequence_classification`: a local transformers classifier on labelled JSONL.

Class names come from the model config's `id2label`, so the class-name check works with nothing
declared: string labels are encoded through the config's `label2id` (a label it does not know is
an error naming the line), and integer labels are cross-checked against a name column when the
data has one (`name_field`). A shuffled or default (`LABEL_0`, …) mapping then fails `inspect`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from . import hf_model
from .contract import CLASSIFICATION, Example, Task
from .hf_data import DataError, load_classification_examples

PATH_OPTIONS = ("model", "data")
AUTO_CLASS = "AutoModelForSequenceClassification"


def class_names_of(config: Mapping[str, Any], model_dir: Path) -> tuple[list[str], dict[str, int]]:
    """id -> name in id order from `id2label`, and `label2id` (from the config, else inverted)."""
    id2label = config.get("id2label") or {}
    try:
        by_id = {int(k): str(v) for k, v in id2label.items()}
    except ValueError:
        raise DataError(f"{model_dir / 'config.json'}: id2label keys must be class ids") from None
    if not by_id or sorted(by_id) != list(range(len(by_id))):
        raise DataError(
            f"{model_dir / 'config.json'}: id2label must name classes 0..n-1 (got {sorted(by_id)[:8]})"
        )
    names = [by_id[k] for k in range(len(by_id))]
    label2id = {str(k): int(v) for k, v in (config.get("label2id") or {}).items()} or {
        name: k for k, name in enumerate(names)
    }
    return names, label2id


def encode_labels(examples: list[dict[str, Any]], label2id: Mapping[str, int], data: Path) -> None:
    """Each example's `label` as a class id; `meaning` is what the data says the class is."""
    for ex in examples:
        raw = ex["label"]
        if isinstance(raw, str):
            if raw not in label2id:
                known = ", ".join(sorted(label2id)[:8])
                raise DataError(
                    f"{data}: line {ex['line']}: label {raw!r} is not in the model config's label2id ({known})"
                )
            ex["meaning"], ex["label"] = raw, int(label2id[raw])
        elif ex.get("label_name"):
            ex["meaning"] = ex["label_name"]


def forward(model: torch.nn.Module, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    return model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask")).logits


def make_task(
    model: str,
    data: str,
    text_field: str = "text",
    label_field: str = "label",
    name_field: str = "",
    group_field: str = "",
    fresh_init: bool = False,
    attn_implementation: str = "",
    dtype: str = "float32",
    lora: dict[str, Any] | None = None,
    limit: int = 0,
) -> Task:
    """The task from a model directory and a JSONL file (paths already resolved by the loader)."""
    model_dir, data_path = Path(model), Path(data)
    config = hf_model.check_model_dir(model_dir, fresh_init)
    names, label2id = class_names_of(config, model_dir)
    examples = load_classification_examples(
        data_path,
        text_field=text_field,
        label_field=label_field,
        name_field=name_field,
        group_field=group_field,
        limit=limit,
    )
    encode_labels(examples, label2id, data_path)
    tok = hf_model.load_tokenizer(model_dir)
    pad_note = hf_model.ensure_pad(tok)
    pad_id = int(tok.pad_token_id)
    cache: dict[str, list[int]] = {}

    def ids_of(text: str) -> list[int]:
        if text not in cache:
            cache[text] = [int(i) for i in tok(text, add_special_tokens=True)["input_ids"]]
        return cache[text]

    def collate(batch: Sequence[Example], max_length: int) -> dict[str, torch.Tensor]:
        rows = [ids_of(ex["text"]) for ex in batch]
        rows = [r[:max_length] if max_length else r for r in rows]
        width = max(1, max(len(r) for r in rows))
        input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            input_ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            mask[i, : len(r)] = 1
        labels = torch.tensor([int(ex["label"]) for ex in batch], dtype=torch.long)
        return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}

    def build() -> torch.nn.Module:
        m = hf_model.load_model(
            model_dir,
            AUTO_CLASS,
            fresh_init=fresh_init,
            attn_implementation=attn_implementation,
            dtype=dtype,
            lora=lora,
        )
        # The classifier reads the last non-padding token: it must know the pad id.
        m.config.pad_token_id = pad_id
        return m

    meanings = any("meaning" in ex for ex in examples)
    return Task(
        name=f"hf-sequence-classification:{model_dir.name}",
        kind=CLASSIFICATION,
        examples=examples,
        build_model=build,
        collate=collate,
        group_key="group",
        decode_token=lambda t: tok.decode(
            [int(t)], skip_special_tokens=False, clean_up_tokenization_spaces=False
        ),
        class_names=tuple(names),
        forward=forward,
        encode_replay=lambda text: {"id": f"control:{text}", "group": "control", "text": text, "label": 0},
        label_meaning=(lambda ex: str(ex.get("meaning", ""))) if meanings else None,
        set_activation_checkpointing=hf_model.set_checkpointing,
        default_max_length=max(len(ids_of(ex["text"])) for ex in examples),
        pad_id=pad_id,
        notes=(pad_note, f"class names from {model_dir.name}/config.json id2label"),
        stack_check=lambda device, precision: hf_model.check_attention(
            model_dir, AUTO_CLASS, attn_implementation, device, precision
        ),
        export_state=hf_model.adapter_state if lora else None,
        load_export=hf_model.load_adapter if lora else None,
    )
