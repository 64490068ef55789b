"""The fake-tensor memory estimate of a captured trainer's model: its architecture rebuilt from its
own config on the meta device (no weight read), batches of its longest rows through its collator."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from ..memory_estimate.fake_run import ModelSource, NotEstimable
from ..memory_estimate.sources import materialize, pad_to


def _forward(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask")).logits


def _checkpointing(model: torch.nn.Module, on: bool) -> None:
    if on:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_disable()


def trainer_source(adapter: Any, model: torch.nn.Module) -> ModelSource:
    """What the fake run needs, from the captured trainer (its model is left untouched)."""
    if hasattr(model, "peft_config"):
        raise NotEstimable("peft", "a peft model of a captured trainer is not estimated yet")
    config = getattr(model, "config", None)
    if config is None or not hasattr(type(model), "_from_config"):
        raise NotEstimable(
            "model", f"{type(model).__name__} is not a transformers model: no config to rebuild"
        )
    cls, dtype = type(model), next(model.parameters()).dtype

    def build() -> torch.nn.Module:
        # Raised inside the fake run, so each configuration's row says "not estimable" and why.
        if getattr(config, "is_encoder_decoder", False):
            raise NotEstimable(
                "encoder-decoder", "an encoder-decoder model of a captured trainer is not estimated yet"
            )

        # On the meta device outside the fake mode, then every tensor a fake one (sources.py).
        with unset_fake_temporarily(), torch.device("meta"):
            fresh = cls._from_config(config, dtype=dtype)
        return materialize(fresh, torch.device("cpu"))

    task = dataclasses.replace(adapter.task, build_model=build, forward=_forward)
    order = {
        split: sorted(range(len(rows)), key=lambda i, s=split: -adapter.length(s, i))
        for split, rows in (("train", adapter.train), ("eval", adapter.eval))
        if rows is not None
    }

    def batch(microbatch: int, length: int, train: bool) -> dict[str, torch.Tensor]:
        split = "train" if train or "eval" not in order else "eval"
        chosen = [{"split": split, "row": i} for i in order[split][:microbatch]]
        while len(chosen) < microbatch:  # a microbatch larger than the split repeats its longest
            chosen += chosen[: microbatch - len(chosen)]
        out = adapter.collate(chosen, length)
        return pad_to({k: v for k, v in out.items() if k != "position_ids"}, length, task)

    return ModelSource(
        task=task,
        build=build,
        batch=batch,
        set_checkpointing=_checkpointing,
        description=f"{getattr(config, 'model_type', '?')} of the captured {type(adapter.trainer).__name__}, "
        "rebuilt from its config (no weights read), batches of its longest rows",
    )
