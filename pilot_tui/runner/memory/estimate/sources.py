"""Where the fake run gets its model and batches: a campaign's task, or a Hugging Face config alone."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import unset_fake_temporarily

from ....core.reasons import exception_line
from ....tasks.contract import CAUSAL_LM, Task
from ...context import RunContext
from .fake_run import ModelSource, NotEstimable


def pad_to(batch: dict[str, torch.Tensor], length: int, task: Task) -> dict[str, torch.Tensor]:
    """Right-pad every per-token tensor of a causal-LM batch to `length`: the longest sequences the
    configuration admits, whatever the pilot's data holds (the rental's data may be longer)."""
    if task.kind != CAUSAL_LM:
        return batch
    fill = {"input_ids": task.pad_id, "attention_mask": 0, "labels": task.ignore_index}
    width = batch["input_ids"].shape[1]
    if width >= length:
        return batch
    out = dict(batch)
    for key, value in batch.items():
        if value.dim() == 2 and value.shape[1] == width:
            out[key] = F.pad(value, (0, length - width), value=fill.get(key, 0))
    return out


def raw_length(task: Task, example: Any) -> int:
    """Untruncated length of one example as the task's collate builds it (as eval_longest reads it)."""
    batch = task.collate([example], 0)
    if "raw_length" in batch:
        return int(batch["raw_length"][0])
    if "attention_mask" in batch:
        return int(batch["attention_mask"].sum())
    return int(batch["labels"].numel())


# Examples scanned for the longest ones (a task whose batch shape depends on its examples'
# lengths); a causal LM is padded to the max length anyway and needs no scan.
SCAN_LIMIT = 4096


def _longest(ctx: RunContext, indices: Sequence[int], count: int, max_length: int) -> list[int]:
    if ctx.task.kind == CAUSAL_LM:
        chosen = list(indices[:count])
    else:
        scanned = list(indices[:SCAN_LIMIT])
        lengths = [raw_length(ctx.task, ctx.task.examples[i]) for i in scanned]
        order = sorted(range(len(scanned)), key=lambda j: (-lengths[j], scanned[j]))
        chosen = [scanned[j] for j in order[:count]]
    # A microbatch larger than the split repeats its longest examples (the shape is what counts).
    while chosen and len(chosen) < count:
        chosen += chosen[: count - len(chosen)]
    return chosen


def task_source(ctx: RunContext) -> ModelSource:
    """The campaign's own model and its longest training / validation examples."""
    task = ctx.task

    def batch(microbatch: int, length: int, train: bool) -> dict[str, torch.Tensor]:
        split = ctx.splits["train" if train else "validation"] or ctx.splits["train"]
        chosen = _longest(ctx, split, microbatch, length)
        return pad_to(task.collate([task.examples[i] for i in chosen], length), length, task)

    return ModelSource(
        task=task,
        build=task.build_model,
        batch=batch,
        set_checkpointing=task.set_activation_checkpointing,
        description=f"task {task.name}",
    )


# ------------------------------------------------------------------ Hugging Face, config only


class ModelDirError(Exception):
    """A model directory that cannot be estimated; one line naming the file."""


def read_hf_config(model_dir: Path) -> dict[str, Any]:
    """The model's config.json as a dict, checked enough to say what is wrong in one line."""
    path = model_dir / "config.json"
    if not model_dir.is_dir():
        raise ModelDirError(f"{model_dir}: not a directory")
    if not path.is_file():
        raise ModelDirError(f"{path}: no config.json in the model directory")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelDirError(f"{path}: cannot be read as JSON: {exc}") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise ModelDirError(f"{path}: no model_type: not a transformers config")
    return data


def materialize(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """Replace every meta parameter and buffer by an empty tensor on `device` (a fake one under
    the fake mode), keeping ties (one tensor shared by two modules stays shared) and requires_grad."""
    memo: dict[int, torch.Tensor] = {}
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is not None:
                if id(p) not in memo:
                    memo[id(p)] = torch.nn.Parameter(
                        torch.empty(p.shape, dtype=p.dtype, device=device), requires_grad=p.requires_grad
                    )
                module._parameters[name] = memo[id(p)]  # type: ignore[assignment]
        for name, b in list(module._buffers.items()):
            if b is not None:
                if id(b) not in memo:
                    memo[id(b)] = torch.empty(b.shape, dtype=b.dtype, device=device)
                module._buffers[name] = memo[id(b)]
    return model


def with_lora(model: torch.nn.Module, lora: dict[str, Any], causal: bool = True) -> torch.nn.Module:
    """The model with peft's LoRA adapters (`lora = { r, alpha, dropout, target_modules }`):
    only the adapters are trainable, so only they carry gradients and optimizer state."""
    try:  # the hf extra: only a LoRA campaign needs peft
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise NotEstimable("peft", "the campaign asks for LoRA: pip install 'pilot-tui[hf]' (peft)") from None
    config = LoraConfig(
        r=int(lora.get("r", 8)),
        lora_alpha=int(lora.get("alpha", 16)),
        lora_dropout=float(lora.get("dropout", 0.0)),
        # None: peft's default modules for the architecture, as the task's own LoRA does.
        target_modules=lora.get("target_modules") or None,
        task_type="CAUSAL_LM" if causal else "SEQ_CLS",
    )
    return get_peft_model(model, config)


def hf_source(
    model_dir: Path,
    lora: dict[str, Any] | None = None,
    *,
    kind: str = CAUSAL_LM,
    dtype: str = "float32",
    attn_implementation: str = "",
) -> ModelSource:
    """A transformers model built from `config.json` alone: no weights are read, every tensor is
    fake. A causal LM (`AutoModelForCausalLM`) or a sequence classifier, in the task's load dtype
    (`float32` master weights by default, as the runner trains them; precision is autocast)."""
    read_hf_config(model_dir)
    try:  # the hf extra: only a model directory needs transformers
        import transformers
    except ImportError:
        raise ModelDirError(
            "estimating a Hugging Face model needs transformers: pip install 'pilot-tui[hf]'"
        ) from None
    try:
        config = transformers.AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
    except Exception as exc:
        raise ModelDirError(f"{model_dir / 'config.json'}: {exception_line(exc)}") from None
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    if vocab <= 0:
        raise ModelDirError(f"{model_dir / 'config.json'}: no vocab_size")
    causal = kind == CAUSAL_LM
    if not causal and getattr(config, "pad_token_id", None) is None:
        # The classifier pools at the last non-pad token and needs a pad id for batches over 1;
        # the task gives it the tokenizer's. Which id it is changes no memory.
        eos = getattr(config, "eos_token_id", None)
        config.pad_token_id = eos if isinstance(eos, int) else 0
    auto = transformers.AutoModelForCausalLM if causal else transformers.AutoModelForSequenceClassification
    load_dtype = getattr(torch, dtype, None)
    if not isinstance(load_dtype, torch.dtype):
        raise ModelDirError(f"task.options.dtype: not a torch dtype: {dtype!r}")
    extra = {"attn_implementation": attn_implementation} if attn_implementation else {}

    def build() -> torch.nn.Module:
        # Built on the meta device outside the fake mode (transformers and peft move modules with
        # `.to()`, which cannot swap fake parameters), then every tensor becomes a fake one.
        with unset_fake_temporarily(), torch.device("meta"):
            # transformers 5 spells it `dtype`, 4.x `torch_dtype`.
            try:
                model = auto.from_config(config, dtype=load_dtype, **extra)
            except TypeError:
                model = auto.from_config(config, torch_dtype=load_dtype, **extra)
            if lora:
                model = with_lora(model, lora, causal)
        return materialize(model, torch.device("cpu"))

    def synthetic(microbatch: int, length: int) -> dict[str, torch.Tensor]:
        ids = torch.ones((microbatch, length), dtype=torch.long)
        labels = ids.clone() if causal else torch.zeros(microbatch, dtype=torch.long)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}

    def collate(examples: Sequence[Any], max_length: int) -> dict[str, torch.Tensor]:
        return synthetic(len(examples), max_length)

    def forward(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits

    def checkpointing(model: torch.nn.Module, on: bool) -> None:
        if on:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_disable()

    task = Task(
        name=f"hf:{model_dir.name}",
        kind=kind,
        examples=[{"group": "0"}],
        build_model=build,
        collate=collate,
        forward=forward,
        set_activation_checkpointing=checkpointing,
    )
    what = f"{getattr(config, 'model_type', '?')} from {model_dir / 'config.json'} (no weights read)"
    if dtype != "float32":
        what += f", weights in {dtype}"
    return ModelSource(
        task=task,
        build=build,
        batch=lambda mb, length, train: synthetic(mb, length),
        set_checkpointing=checkpointing,
        description=what + (f", LoRA r={lora.get('r', 8)}" if lora else ""),
    )


def hf_default_length(model_dir: Path) -> int:
    data = read_hf_config(model_dir)
    return int(data.get("max_position_embeddings") or 2048)


__all__ = ["ModelDirError", "NotEstimable", "hf_source", "pad_to", "read_hf_config", "task_source"]
