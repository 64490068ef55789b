"""A local Hugging Face model directory: checked, loaded (never from the hub), optionally with LoRA.

Shared by the two built-in HF tasks and `pilot-tui init`. Library chatter (transformers' logging
and warnings) is silenced while loading, so a refusal stays the one line of exit code 2.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..core.reasons import exception_line
from .hf_data import DataError

EXTRA = "pip install 'pilot-tui[hf]'"
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "*.pt")


def require(module: str) -> Any:
    """Import an optional dependency or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise DataError(f"the built-in Hugging Face tasks need {module!r}: {EXTRA}") from None


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence transformers' logger, Python warnings and stray prints while loading."""
    logger = logging.getLogger("transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def weight_files(model_dir: Path) -> list[Path]:
    return sorted(p for pattern in WEIGHT_PATTERNS for p in model_dir.glob(pattern))


def check_model_dir(model_dir: Path, fresh_init: bool = False) -> dict[str, Any]:
    """The directory's config.json as a dict; refuses a missing dir, config, or weights (unless
    `fresh_init`, pretraining from scratch, is declared)."""
    if not model_dir.is_dir():
        raise DataError(f"{model_dir}: model directory not found")
    config = model_dir / "config.json"
    try:
        raw = json.loads(config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{config}: no config.json in the model directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{config}: cannot read the model config: {exc}") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{config}: line {exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(raw, dict):
        raise DataError(f"{config}: expected a JSON object")
    if not fresh_init and not weight_files(model_dir):
        raise DataError(
            f"{model_dir}: no weights (*.safetensors or pytorch_model*.bin); to pretrain from scratch "
            "declare task.options.fresh_init = true"
        )
    return raw


def load_tokenizer(model_dir: Path) -> Any:
    transformers = require("transformers")
    try:
        with quiet():
            tok = transformers.AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    except Exception as exc:
        raise DataError(f"{model_dir}: cannot load the tokenizer: {exception_line(exc)}") from None
    if not getattr(tok, "is_fast", False):
        raise DataError(
            f"{model_dir}: the tokenizer is not a fast tokenizer (tokenizer.json needed for offsets)"
        )
    return tok


def ensure_pad(tok: Any) -> str:
    """Give a tokenizer without a pad token one; say which (the load row shows it)."""
    if tok.pad_token_id is not None:
        return f"pad token {tok.pad_token!r} (the tokenizer's own)"
    for name in ("unk_token", "eos_token"):
        value = getattr(tok, name, None)
        if value is not None:
            tok.pad_token = value
            return f"pad token {value!r} (the tokenizer has none: its {name.removesuffix('_token')} token is used)"
    raise DataError("the tokenizer has no pad, unk or eos token to pad with")


def load_model(
    model_dir: Path,
    auto_class: str,
    *,
    fresh_init: bool = False,
    attn_implementation: str = "",
    dtype: str = "float32",
    lora: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Any:
    """Build the model from the directory; weights from disk, or fresh when declared."""
    transformers = require("transformers")
    # `pilot-tui init` imports this module: no view-side module loads torch at import (test_layers).
    import torch

    cls = getattr(transformers, auto_class)
    kwargs: dict[str, Any] = dict(extra or {})
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    torch_dtype = getattr(torch, dtype)
    try:
        with quiet():
            if fresh_init:
                config = transformers.AutoConfig.from_pretrained(
                    str(model_dir), local_files_only=True, **kwargs
                )
                model = cls.from_config(config, torch_dtype=torch_dtype)
            else:
                model = cls.from_pretrained(
                    str(model_dir), local_files_only=True, torch_dtype=torch_dtype, **kwargs
                )
    except Exception as exc:
        raise DataError(f"{model_dir}: cannot load the model: {exception_line(exc)}") from None
    if lora:
        model = apply_lora(model, lora)
    return model


def apply_lora(model: Any, lora: Mapping[str, Any]) -> Any:
    peft = require("peft")
    known = {"r", "alpha", "dropout", "target_modules"}
    unknown = set(lora) - known
    if unknown:
        raise DataError(
            f"task.options.lora: unknown key(s) {', '.join(sorted(unknown))} (known: r, alpha, dropout, target_modules)"
        )
    config = peft.LoraConfig(
        r=int(lora.get("r", 8)),
        lora_alpha=int(lora.get("alpha", 16)),
        lora_dropout=float(lora.get("dropout", 0.0)),
        target_modules=lora.get("target_modules") or None,
    )
    try:
        with quiet():
            return peft.get_peft_model(model, config)
    except Exception as exc:
        raise DataError(f"task.options.lora: {exception_line(exc)}") from None


def is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config")


def adapter_state(model: Any) -> dict[str, Any]:
    """What the export saves for a LoRA model: the adapter alone."""
    peft = require("peft")
    return peft.get_peft_model_state_dict(model)


def load_adapter(model: Any, tensors: Mapping[str, Any]) -> None:
    """Apply an exported adapter to a freshly built base + LoRA model; every key must land."""
    peft = require("peft")
    expected = set(peft.get_peft_model_state_dict(model))
    missing = expected - set(tensors)
    extra = set(tensors) - expected
    if missing or extra:
        raise ValueError(
            f"the adapter does not match the model: missing {sorted(missing)[:3]}, unexpected {sorted(extra)[:3]}"
        )
    peft.set_peft_model_state_dict(model, dict(tensors))


def set_checkpointing(model: Any, on: bool) -> None:
    """The model's own gradient checkpointing (non-reentrant: works with frozen LoRA bases)."""
    if on:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_disable()


# Attributes that size a transformer in most HF configs, shrunk for the stack's attention probe.
_SHRINK = {
    "num_hidden_layers": 1,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 128,
}


def check_attention(
    model_dir: Path, auto_class: str, attn_implementation: str, device: Any, precision: str
) -> dict[str, Any]:
    """Run the chosen attention implementation for real: the same architecture, shrunk to one tiny
    layer, forward and backward on the campaign's device and precision."""
    import torch  # see load_model

    chosen = attn_implementation or "default"
    out: dict[str, Any] = {"name": f"attn_implementation {chosen}", "ok": True, "error": ""}
    try:
        transformers = require("transformers")
        with quiet():
            config = transformers.AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
            for key, value in _SHRINK.items():
                if hasattr(config, key):
                    setattr(config, key, value)
            config.pad_token_id = 0  # a classifier head needs one; the probe's ids are random anyway
            kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
            model = getattr(transformers, auto_class).from_config(config, **kwargs).to(device)
            ids = torch.randint(0, 128, (2, 16), device=device)
            dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
            ctx = torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()
            with ctx:
                logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
            logits.float().sum().backward()
        out["used"] = str(getattr(model.config, "_attn_implementation", chosen))
        if not torch.isfinite(logits.float()).all():
            out |= {"ok": False, "error": "non-finite logits from the probe"}
    except Exception as exc:
        out |= {"ok": False, "error": exception_line(exc)}
    return out
