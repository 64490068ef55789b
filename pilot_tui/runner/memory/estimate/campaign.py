"""A campaign's configurations, estimated one by one: control, memory variants, fit-search points."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from ....analysis import memory_estimate as est
from ....core import dimensions
from ....core.spec import LoadedSpec
from ....tasks.contract import CAUSAL_LM, CLASSIFICATION
from ...context import RunContext
from .fake_run import FakeConfig, ModelSource, run_fake
from .sources import hf_default_length, hf_source, task_source

HF_BUILTINS = {"hf_causal_lm": CAUSAL_LM, "hf_sequence_classification": CLASSIFICATION}


@dataclass(frozen=True)
class Target:
    """The machine the estimate is for: strategy, GPUs per configuration, GPU memory (0 = any)."""

    strategy: str = "none"
    gpus: int = 1
    gpu_memory_gb: float = 0.0
    headroom: float = 0.15


def target_of(loaded: LoadedSpec, **flags: Any) -> Target:
    """The spec's `[estimate]` values (else `plan.gpus`), overridden by the command-line flags."""
    spec = loaded.spec
    section = getattr(spec, "estimate", None)
    gpus = int(flags.get("gpus") or getattr(section, "gpus", 0) or spec.plan.gpus or 1)
    strategy = str(
        flags.get("strategy") or getattr(section, "strategy", "") or ("none" if gpus == 1 else "ddp")
    )
    memory = float(flags.get("gpu_memory_gb") or getattr(section, "gpu_memory_gb", 0) or 0)
    return Target(strategy=strategy, gpus=gpus, gpu_memory_gb=memory, headroom=spec.plan.headroom)


def with_batch_overrides(loaded: LoadedSpec, **batch: Any) -> LoadedSpec:
    """The spec with the command line's precision / microbatch / max length as the control's own,
    so memory variants still change what they declare."""
    changes = {k: v for k, v in batch.items() if v}
    if not changes:
        return loaded
    spec = replace(loaded.spec, batch=replace(loaded.spec.batch, **changes))
    return replace(loaded, spec=spec)


def fake_config(
    ctx: RunContext, name: str, target: Target, overrides: dict[str, Any] | None = None
) -> FakeConfig:
    """The configuration's estimable dimensions (core/dimensions.py), for the target machine."""
    variant = name if not name.startswith("fit-") else "control"
    cfg = ctx.config(variant, overrides)
    values = {d.name: cfg.value(d.name) for d in dimensions.estimable()}
    own = {f.name for f in fields(FakeConfig)}
    base: dict[str, Any] = {
        "name": name,
        "strategy": target.strategy,
        "gpus": target.gpus,
        "eval_microbatch": int(ctx.spec.phases.eval_microbatch or cfg.microbatch),
        "grad_clip": ctx.spec.optim.grad_clip,
        "weight_decay": ctx.spec.optim.weight_decay,
    }
    # A dimension's value (the configuration's own) wins over the spec's section value.
    base |= {k: v for k, v in values.items() if k in own}
    return FakeConfig(**base, extra=tuple((k, v) for k, v in values.items() if k not in own))


def campaign_configs(ctx: RunContext, target: Target) -> list[FakeConfig]:
    """Control, each memory variant, then each fit-search point (microbatch × max length)."""
    configs = [fake_config(ctx, "control", target)]
    # A trainer variant with other args or env is another capture: its model and precision are
    # known only once that script has run, so it is not estimated as the control's would be.
    configs += [fake_config(ctx, v.id, target) for v in ctx.spec.variants if not v.fresh_capture]
    fs = ctx.spec.fit_search
    if fs is not None:
        control = ctx.config("control")
        for length in sorted(fs.max_lengths or [control.max_length]):
            for mb in sorted(fs.microbatches):
                name = f"fit-mb{mb}-len{length}"
                configs.append(fake_config(ctx, name, target, {"microbatch": mb, "max_length": length}))
    return configs


def source_for(ctx: RunContext) -> ModelSource:
    """The campaign's training says what to rebuild (a captured trainer: its own model and rows);
    without one, the task's (`task_campaign_source`)."""
    if ctx.training is not None:
        return ctx.training.estimate_source(ctx)
    return task_campaign_source(ctx)


def task_campaign_source(ctx: RunContext) -> ModelSource:
    """A Hugging Face campaign is estimated from its config.json (never its weights); others from the task."""
    t = ctx.spec.task
    if t.builtin in HF_BUILTINS and t.options.get("model"):
        return hf_campaign_source(ctx.loaded)
    return task_source(ctx)


def hf_campaign_source(loaded: LoadedSpec) -> ModelSource:
    """A Hugging Face campaign's model from its config (never its weights), as its task builds it:
    its load dtype, attention implementation and LoRA."""
    o = loaded.spec.task.options
    lora = o.get("lora")
    return hf_source(
        loaded.resolve(str(o["model"])),
        lora if isinstance(lora, dict) else None,
        kind=HF_BUILTINS[loaded.spec.task.builtin],
        dtype=str(o.get("dtype") or "float32"),
        attn_implementation=str(o.get("attn_implementation") or ""),
    )


def estimate_configs(
    source: ModelSource,
    configs: list[FakeConfig],
    target: Target,
    progress: Callable[[int, int, str], None] | None = None,
    confirm: bool = True,
    fixed_bytes: int = 0,
) -> dict[str, Any]:
    """Every configuration's fake run, its verdict, and the rental recommendation for the control.

    `fixed_bytes` is what the device's libraries hold whatever the model (runner/memory/
    workspaces.py): every measured peak holds it, so every estimated peak does too.
    """
    entries = []
    for i, cfg in enumerate(configs):
        if progress is not None:
            # Seconds each on a large model: the line says which configuration is being run.
            progress(i, len(configs), f"{cfg.name}: one training update and an eval pass under fake tensors")
        entry = cfg.params() | with_fixed(run_fake(source, cfg), fixed_bytes)
        entry["verdict"] = est.verdict(entry, target.headroom, target.gpu_memory_gb)
        if entry["name"] == "control" and entry["verdict"].get("fits") is False:
            entry["smallest_configuration"] = smallest_confirmed(
                source, cfg, entry, target, confirm, fixed_bytes
            )
        entries.append(entry)
        if progress is not None:
            progress(i + 1, len(configs), f"{cfg.name}: {entry['verdict'].get('status')}")
    return {
        "source": source.description,
        "target": vars(target).copy(),
        "allowance": est.ALLOWANCE_NOTE,
        "configurations": entries,
        "recommendation": est.recommendation(entries, target.headroom),
    }


def with_fixed(result: dict[str, Any], fixed_bytes: int) -> dict[str, Any]:
    """A fake run's result with the device's fixed allocations added to both of its peaks."""
    if not result.get("estimable") or not fixed_bytes:
        return result
    return result | {
        "library_workspaces_bytes": fixed_bytes,
        "peak_allocated_bytes": result["peak_allocated_bytes"] + fixed_bytes,
        "eval_peak_allocated_bytes": result["eval_peak_allocated_bytes"] + fixed_bytes,
    }


def smallest_confirmed(
    source: ModelSource,
    cfg: FakeConfig,
    entry: dict[str, Any],
    target: Target,
    confirm: bool,
    fixed_bytes: int = 0,
    tries: int = 2,
) -> dict[str, Any] | None:
    """The cheapest rental that would hold the control: extrapolated from its components, then
    checked by a fake run of that configuration (the next candidate when the check says no)."""
    options = est.candidates(entry, target.headroom)
    if not options:
        return None
    if not confirm:
        return options[0] | {"basis": "extrapolated from the estimate"}
    for best in options[:tries]:
        checked = with_fixed(
            run_fake(source, replace(cfg, strategy=best["strategy"], gpus=best["gpus"])), fixed_bytes
        )
        if not checked.get("estimable"):
            return best | {"basis": f"extrapolated; the fake run of it failed: {checked.get('reason')}"}
        peak = max(checked["peak_allocated_bytes"], checked["eval_peak_allocated_bytes"])
        need = est.need_mib(peak, target.headroom)
        if need <= est.gpu_mib(best["gpu_memory_gb"]):
            return best | {
                "need_mib": round(need, 1),
                "peak_allocated_bytes": peak,
                "basis": "estimated by a fake run of that configuration",
            }
    return options[0] | {"basis": "extrapolated; not confirmed by the fake runs tried"}


def estimate_model_dir(
    model_dir: Path,
    target: Target,
    progress: Callable[[int, int, str], None] | None = None,
    **batch: Any,
) -> dict[str, Any]:
    """`pilot-tui estimate --model DIR`: one configuration from the flags, config.json alone."""

    source = hf_source(model_dir)
    length = int(batch.get("max_length") or min(2048, hf_default_length(model_dir)))
    cfg = FakeConfig(
        name="control",
        microbatch=int(batch.get("microbatch") or 1),
        accumulation=1,
        max_length=length,
        precision=str(batch.get("precision") or "bf16"),
        activation_checkpointing=bool(batch.get("activation_checkpointing")),
        strategy=target.strategy,
        gpus=target.gpus,
    )
    return estimate_configs(source, [cfg], target, progress)
