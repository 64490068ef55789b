"""The fake-tensor memory estimate of a captured trainer's model: its architecture rebuilt from its
own config on the meta device (no weight read), batches of its longest rows through its collator.

A peft model is rebuilt the same way: its base from the base's config, then the captured adapter
config applied by peft (`get_peft_model`), so only the adapters are trainable and gradients and
optimizer state count only them — the path the built-in `hf_causal_lm` LoRA estimate takes.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from ...memory.estimate.fake_run import ModelSource, NotEstimable
from ...memory.estimate.sources import materialize, pad_to

# The trainer's `optim` as the optimizer the estimate builds (runner/loop/optimizers.py), and what differs.
OPTIMIZERS: dict[str, tuple[str, str]] = {
    "adamw_torch": ("adamw", ""),
    "adamw_torch_fused": ("adamw_fused", ""),
    "adamw_torch_xla": ("adamw", ""),
    "adamw_torch_npu_fused": ("adamw_fused", ""),
    # transformers' Adafactor keeps the same factored second moments (a row and a column per matrix).
    "adafactor": ("adafactor", "torch's Adafactor stands for transformers' (the same factored state)"),
}


def trainer_optimizer(args: Any) -> tuple[str, str]:
    """(the estimate's optimizer, a note when it is not the trainer's own) for `args.optim`."""
    optim = str(getattr(args.optim, "value", args.optim))
    name, note = OPTIMIZERS.get(optim, ("", ""))
    if name:
        return name, f"optimizer {optim} estimated as {name}" + (f" ({note})" if note else "")
    if "8bit" in optim or "4bit" in optim:
        why = "its state is quantised: the estimate's 32-bit AdamW moments over-count it"
    else:
        why = "the estimate does not know its state"
    return "adamw", f"optimizer {optim} estimated as adamw: {why}"


def _forward(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask")).logits


def _checkpointing(model: torch.nn.Module, on: bool) -> None:
    # Non-reentrant: the frozen base of a peft model leaves the inputs without a gradient.
    if on:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_disable()


def _peft_parts(model: torch.nn.Module) -> tuple[torch.nn.Module, Any, str] | None:
    """(the base model, the active adapter's config, how it is applied) of a peft model; None
    for a plain one. A `PeftModel` wraps its base; transformers' own peft integration
    (`model.add_adapter`) keeps the config on the model itself."""
    configs = getattr(model, "peft_config", None)
    if not configs:
        return None
    active = getattr(model, "active_adapter", None)
    active = active[0] if isinstance(active, list | tuple) else active
    name = active if active in configs else next(iter(configs))
    if len(configs) > 1:
        raise NotEstimable(
            "peft", f"the model holds {len(configs)} adapters ({', '.join(configs)}): only one is estimated"
        )
    config = copy.deepcopy(configs[name])
    if hasattr(model, "get_base_model"):
        return model.get_base_model(), config, "peft"
    return model, config, "add_adapter"


def rebuilder(model: torch.nn.Module) -> tuple[Any, str]:
    """A function building the model again on the meta device, and what it rebuilt."""
    parts = _peft_parts(model)
    base, peft_config, how = parts if parts is not None else (model, None, "")
    config = getattr(base, "config", None)
    if config is None or not hasattr(type(base), "_from_config"):
        raise NotEstimable(
            "model", f"{type(base).__name__} is not a transformers model: no config to rebuild"
        )
    cls = type(base)
    frozen = [p for p in base.parameters() if not p.requires_grad]
    # The base's own dtype (a peft model's adapters may be float32 over a bf16 base).
    dtype = (frozen or list(base.parameters()))[0].dtype

    def build() -> torch.nn.Module:
        # Raised inside the fake run, so each configuration's row says "not estimable" and why.
        if getattr(config, "is_encoder_decoder", False):
            raise NotEstimable(
                "encoder-decoder", "an encoder-decoder model of a captured trainer is not estimated yet"
            )
        # On the meta device outside the fake mode (peft moves modules with `.to()`, which cannot
        # swap fake parameters), then every tensor a fake one (sources.py).
        with unset_fake_temporarily(), torch.device("meta"):
            fresh = cls._from_config(config, dtype=dtype)
            if how == "peft":
                from peft import get_peft_model  # present: the captured model is a peft one

                fresh = get_peft_model(fresh, copy.deepcopy(peft_config))
            elif how == "add_adapter":
                fresh.add_adapter(copy.deepcopy(peft_config))
        return materialize(fresh, torch.device("cpu"))

    what = f"{getattr(config, 'model_type', '?')}"
    if peft_config is not None:
        kind = str(getattr(peft_config.peft_type, "value", peft_config.peft_type))
        rank = getattr(peft_config, "r", None)
        what += f" + its {kind} adapter" + (f" r={rank}" if rank else "") + " (only the adapter trains)"
    return build, what


def trainer_source(adapter: Any, model: torch.nn.Module) -> ModelSource:
    """What the fake run needs, from the captured trainer (its model is left untouched)."""
    build, what = rebuilder(model)
    task = dataclasses.replace(adapter.task, build_model=build, forward=_forward)
    order = {
        split: sorted(range(len(rows)), key=lambda i, s=split: -adapter.length(s, i))
        for split, rows in adapter.row_sets().items()
    }
    evals = [s for s in order if s != "train" and order[s]]

    def batch(microbatch: int, length: int, train: bool) -> dict[str, torch.Tensor]:
        # The evaluation pass on the eval set holding the longest row (every set is evaluated).
        split = "train" if train or not evals else max(evals, key=lambda s: adapter.length(s, order[s][0]))
        chosen = [{"split": split, "row": i} for i in order[split][:microbatch]]
        while len(chosen) < microbatch:  # a microbatch larger than the split repeats its longest
            chosen += chosen[: microbatch - len(chosen)]
        out = adapter.collate(chosen, length)
        return pad_to({k: v for k, v in out.items() if k != "position_ids"}, length, task)

    _, note = trainer_optimizer(adapter.trainer.args)
    return ModelSource(
        task=task,
        build=build,
        batch=batch,
        set_checkpointing=_checkpointing,
        description=f"{what} of the captured {type(adapter.trainer).__name__}, rebuilt from its config "
        f"(no weights read), batches of its longest rows; {note}",
    )
