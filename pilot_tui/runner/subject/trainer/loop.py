"""Driving the captured trainer: its real `train()` for a given number of updates, the weights
put back between gates, and the accumulation check on its own `training_step`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from ...checks.objective_checks import AccumulationCheck, compare_accumulation
from .kinds import Kind
from .probe import StepProbe


def encoder_decoder(model: Any) -> bool:
    """An encoder-decoder (`Seq2SeqTrainer`'s T5, BART…): its loss scores every target, unshifted."""
    return bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))


def loss_owner(trainer: Any) -> str:
    """Whose code computes the trainer's loss, for a verdict that must name what to fix."""
    if getattr(trainer, "compute_loss_func", None) is not None:
        return "the trainer's compute_loss_func"
    own = type(trainer).compute_loss
    if not own.__module__.startswith(("transformers.", "trl.")):
        return f"the script's {own.__qualname__}"
    model = unwrapped(trainer)
    if getattr(trainer, "model_accepts_loss_kwargs", False):
        return (
            f"{type(model).__name__}'s own loss: its forward takes **kwargs, so the Trainer leaves the "
            "division by num_items_in_batch to it and does not divide by the accumulation steps"
        )
    return f"{type(model).__name__}'s own loss"


def loss_cure(trainer: Any, unit: str, flag_cures: bool = False) -> str:
    """The line a user adds to their script so one update weighs its {unit}, not its microbatches.
    `flag_cures`: `model_accepts_loss_kwargs = False` was measured to give the same update (it
    does where every microbatch weighs alike, e.g. a classifier's: one target an example)."""
    if getattr(trainer, "compute_loss_func", None) is not None:
        return (
            f"in the compute_loss_func the script passes, sum the loss over the batch's {unit} and divide "
            "by num_items_in_batch (the Trainer passes the whole window's count)"
        )
    own = type(trainer).compute_loss
    if not own.__module__.startswith(("transformers.", "trl.")):
        return (
            f"in {own.__qualname__}, sum the loss over the batch's {unit} and divide by num_items_in_batch "
            "(the Trainer passes the whole window's count), as Trainer.compute_loss does"
        )
    if getattr(trainer, "model_accepts_loss_kwargs", False) and flag_cures:
        return (
            "after building the trainer, set `trainer.model_accepts_loss_kwargs = False`: the Trainer then "
            "divides each microbatch's loss by the accumulation steps (this model's loss ignores "
            "num_items_in_batch)"
        )
    return (
        f"pass the Trainer a compute_loss_func that sums the loss over the batch's {unit} and divides by "
        "num_items_in_batch"
    )


@contextlib.contextmanager
def as_cured(trainer: Any) -> Iterator[bool]:
    """The trainer with the cure `loss_cure` names for a model's own loss, when it is that one
    flag (yields whether it is): the check is measured again under it, never the run."""
    own = type(trainer).compute_loss.__module__.startswith(("transformers.", "trl."))
    flag = own and getattr(trainer, "compute_loss_func", None) is None and trainer.model_accepts_loss_kwargs
    if not flag:
        yield False
        return
    trainer.model_accepts_loss_kwargs = False
    try:
        yield True
    finally:
        trainer.model_accepts_loss_kwargs = True


def compute_precision(trainer: Any) -> str:
    """bf16 / fp16 when the trainer's trainable weights are half precision or it computes under
    half-precision autocast, else fp32: what the accumulation check's tolerance follows."""
    args = trainer.args
    dtypes = {p.dtype for p in unwrapped(trainer).parameters() if p.requires_grad}
    mixed = str(getattr(args, "mixed_precision", "no") or "no")  # accelerate's environment's
    if torch.bfloat16 in dtypes or args.bf16 or mixed == "bf16":
        return "bf16"
    if torch.float16 in dtypes or args.fp16 or mixed == "fp16":
        return "fp16"
    return "fp32"


def unwrapped(trainer: Any) -> torch.nn.Module:
    return (
        trainer.accelerator.unwrap_model(trainer.model) if hasattr(trainer, "accelerator") else trainer.model
    )


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights (and buffers) as captured, on the host: later gates start from them again."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def restore(model: torch.nn.Module, saved: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for k, v in model.state_dict().items():
            if k in saved:
                v.copy_(saved[k])
    model.zero_grad(set_to_none=True)


def fresh_optimizer(trainer: Any) -> None:
    """The next `train()` builds the trainer's optimizer and scheduler anew, as a new run would."""
    trainer.optimizer, trainer.lr_scheduler = None, None


def train_steps(
    trainer: Any, steps: int, probe: StepProbe, resume: str | None = None, callbacks: Sequence[Any] = ()
) -> Any:
    """The trainer's own `train()` for `steps` updates (its scheduler built for them); `callbacks`
    run after the probe at each event (a callback may stop the loop sooner)."""
    trainer.args.max_steps = steps
    added = [probe, *callbacks]
    for cb in added:
        trainer.add_callback(cb)
    try:
        return trainer.train(resume_from_checkpoint=resume)
    finally:
        for cb in added:
            trainer.remove_callback(cb)


def checkpointing(args: Any) -> bool:
    """Activation checkpointing as the trainer reads it (`gradient_checkpointing` is its old name)."""
    return bool(
        getattr(args, "activation_checkpointing", None) or getattr(args, "gradient_checkpointing", None)
    )


def _set_checkpointing(trainer: Any, on: bool) -> None:
    args = trainer.args
    key = (
        "activation_checkpointing" if hasattr(args, "activation_checkpointing") else "gradient_checkpointing"
    )
    setattr(args, key, on)
    if not on:
        # train() switches it on when asked and never off: a variant without it must say so.
        model = unwrapped(trainer)
        off = getattr(model, "activation_checkpointing_disable", None) or getattr(
            model, "gradient_checkpointing_disable", None
        )
        if off is not None and getattr(model, "is_gradient_checkpointing", False):
            off()


@contextlib.contextmanager
def batch_settings(
    trainer: Any, microbatch: int, accumulation: int, activation_checkpointing: bool
) -> Iterator[None]:
    """A memory variant by changing `trainer.args` in place (what train() reads), put back after."""
    args = trainer.args
    saved = (args.per_device_train_batch_size, trainer._train_batch_size, args.gradient_accumulation_steps)
    saved_ckpt = checkpointing(args)
    # Turning checkpointing on sets config.use_cache = False; the script's model keeps its own.
    config = getattr(unwrapped(trainer), "config", None)
    saved_cache = getattr(config, "use_cache", None)
    args.per_device_train_batch_size = microbatch
    trainer._train_batch_size = args.train_batch_size  # what get_train_dataloader() batches by
    args.gradient_accumulation_steps = accumulation
    _set_checkpointing(trainer, activation_checkpointing)
    try:
        yield
    finally:
        args.per_device_train_batch_size, trainer._train_batch_size, args.gradient_accumulation_steps = saved
        _set_checkpointing(trainer, saved_ckpt)
        if config is not None and saved_cache is not None:
            config.use_cache = saved_cache


def model_inputs(batch: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in batch.items() if k != "labels"}


@contextlib.contextmanager
def no_dropout(model: torch.nn.Module) -> Iterator[None]:
    """Dropout off while two ways of the same update are compared (both must draw nothing)."""
    saved = [(m, m.p) for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    for m, _ in saved:
        m.p = 0.0
    try:
        yield
    finally:
        for m, p in saved:
            m.p = p


def _update_on(trainer: Any) -> Callable[[Sequence[dict[str, Any]]], torch.Tensor]:
    """One update's forward and backward as the trainer's loop runs it (the window's normaliser
    from `_get_num_items_in_batch`, `current_gradient_accumulation_steps`, `training_step`): the
    `compute` the shared accumulation check calls on each grouping."""

    def compute(batches: Sequence[dict[str, Any]]) -> torch.Tensor:
        num_items = trainer._get_num_items_in_batch(list(batches), trainer.args.device)
        trainer.current_gradient_accumulation_steps = len(batches)
        return sum(trainer.training_step(trainer.model, b, num_items).float().cpu() for b in batches)

    return compute


def accumulation_check(
    trainer: Any, rows: list[Any], collate: Any, kind: Kind, tolerance: float = 1e-3
) -> tuple[AccumulationCheck, dict[str, Any]]:
    """The gradient of one update must not depend on how it is cut into microbatches (a loss that
    averages per microbatch weighs a 3-token microbatch like a 30-token one): the pilot's own
    check (`objective_checks.compare_accumulation`, gradient fingerprints, no copy of the
    gradients held) on the trainer's `training_step`. With it, the normaliser each grouping got."""
    model = trainer.model
    saved_steps = getattr(trainer, "current_gradient_accumulation_steps", 1)
    wide, narrow = [collate(rows)], [collate([r]) for r in rows]
    params = [p for p in model.parameters() if p.requires_grad]
    # Each microbatch's scored targets, in the kind's terms (after the causal shift; every target
    # of an encoder-decoder; one class per example).
    lengths = [kind.scored(b["labels"]) if "labels" in b else 0 for b in narrow]
    try:
        with no_dropout(model):
            check = compare_accumulation(
                _update_on(trainer), params, wide, narrow, lengths=lengths, tolerance=tolerance
            )
    finally:
        trainer.current_gradient_accumulation_steps = saved_steps
    items = {
        "num_items_microbatch_n": _items(trainer, wide),
        "num_items_accumulated_n": _items(trainer, narrow),
    }
    return check, items


def _items(trainer: Any, batches: list[dict[str, Any]]) -> int | None:
    n = trainer._get_num_items_in_batch(batches, trainer.args.device)
    return int(n) if n is not None else None


def rank_loss_scale(trainer: Any, rows: list[Any], collate: Any) -> dict[str, Any]:
    """On several ranks: one batch's loss as the trainer's loop normalises it (the token count
    gathered over every rank, `average_tokens_across_devices`) against the one-process loss of
    the same rows. Every rank holds the same rows here, so a loss weighed right is the same
    either way (DDP averages the ranks' gradients: each rank's loss must be its tokens' share of
    the global sum times the number of ranks). A `compute_loss` that divides by the gathered
    `num_items_in_batch` and does not multiply back, as `Trainer.compute_loss` does, gives
    1/N of it. Forward only; the same collectives on every rank."""
    args, model = trainer.args, trainer.model
    batch = collate(rows)

    def loss_now() -> float:
        n = trainer._get_num_items_in_batch([batch], args.device)
        inputs = trainer._prepare_inputs(dict(batch))  # compute_loss may pop the labels
        with trainer.compute_loss_context_manager():
            return float(trainer.compute_loss(model, inputs, num_items_in_batch=n).detach().float().cpu())

    saved = args.average_tokens_across_devices
    try:
        with torch.no_grad(), no_dropout(model):
            on_ranks = loss_now()
            args.average_tokens_across_devices = False  # the count of this rank's rows alone
            alone = loss_now()
    finally:
        args.average_tokens_across_devices = saved
    return {
        "loss_on_ranks": on_ranks,
        "loss_one_process": alone,
        "scale": on_ranks / alone if alone else None,
    }
