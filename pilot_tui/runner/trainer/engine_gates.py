"""The engine gates on a captured trainer: its own `train()` for the first and the steady
updates (after the accumulation check), `evaluate()` on the longest rows, its own checkpoint,
`save_model` and the reload of what it exported."""

from __future__ import annotations

import functools
import math
import time
from pathlib import Path
from typing import Any

import torch

from ...core.verdict import PASS, WARN
from ..context import RunContext
from ..phases.base import Outcome, PhaseFailure, PhaseRun, finite
from ..phases.load import tensor_mb
from . import loop
from .registry import EXPORT_MEMO, Body, adapter_of, body, from_start, probe_for, trainer_of


def _accumulation_rows(ctx: RunContext) -> list[Any]:
    a = trainer_of(ctx).args
    n = max(2, min(8, a.per_device_train_batch_size * a.gradient_accumulation_steps))
    train = adapter_of(ctx).train
    return [train.dataset[i] for i in range(min(n, len(train)))]


def optimizer_state_mb(trainer: Any) -> float:
    opt = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    if opt is None:
        return 0.0
    tensors = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return round(tensor_mb(tensors), 3)


def configured(fn: Body) -> Body:
    """A variant's phase (first_step@V, …) runs with the variant's batch set on `trainer.args`."""

    @functools.wraps(fn)
    def run_configured(ctx: RunContext, run: PhaseRun) -> Outcome:
        cfg = ctx.config(run.step.variant, run.overrides)
        with loop.batch_settings(
            trainer_of(ctx), cfg.microbatch, cfg.accumulation, cfg.activation_checkpointing
        ):
            return fn(ctx, run)

    return run_configured


@body("first_step")
@configured
def first_step(ctx: RunContext, run: PhaseRun) -> Outcome:
    trainer, adapter = trainer_of(ctx), adapter_of(ctx)
    from_start(ctx)
    rows = _accumulation_rows(ctx)
    run.current_input = {"accumulation_check_examples": len(rows)}
    check = loop.accumulation_check(trainer, rows, adapter.train.collate_fn)
    probe = probe_for(ctx, run)
    run.current_input = {"microbatch": trainer.args.per_device_train_batch_size, "update": 1}
    loop.train_steps(trainer, 1, probe)
    logged = probe.rows.get(1, {})
    loss, gn = logged.get("loss", math.nan), logged.get("grad_norm", math.nan)
    details: dict[str, Any] = {
        "loss": loss,
        "grad_norm": gn,
        "lr": logged.get("learning_rate"),
        "step_time_s": probe.step_times()[0] if probe.ends else None,
        "optimizer_state_mb": optimizer_state_mb(trainer),
        "train_batch_size": trainer._train_batch_size,
        "gradient_accumulation_steps": trainer.args.gradient_accumulation_steps,
        "activation_checkpointing": loop.checkpointing(trainer.args),
        "accumulation": check.details(),
        "ran": "the trainer's own train() for max_steps = 1",
    }
    if not check.ok:
        raise PhaseFailure(
            f"one update over the same {check.examples} examples as (microbatch {check.examples}, accumulation 1) "
            f"and as (microbatch 1, accumulation {check.examples}) differs: loss {check.loss_whole:.6g} vs "
            f"{check.loss_accumulated:.6g}, gradient {check.grad_rel_diff:.3g} apart (tolerance "
            f"{check.tolerance:g}): the loss normalisation weighs microbatches, not tokens (a compute_loss "
            "that averages per microbatch and ignores num_items_in_batch?)",
            details,
        )
    if not finite(loss) or not finite(gn):
        raise PhaseFailure(
            f"non-finite {'loss' if not finite(loss) else 'gradient norm'} at the first update", details
        )
    return Outcome(
        PASS,
        f"first update loss {loss:.4g}, grad norm {gn:.3g}; accumulation check: the same update cut into "
        f"microbatches gives the same gradient ({check.grad_rel_diff:.1e} apart)",
        details,
    )


@body("steady")
@configured
def steady(ctx: RunContext, run: PhaseRun) -> Outcome:
    """The trainer's own train() for 1 + N updates; the first (warm-up) is not timed."""
    trainer = trainer_of(ctx)
    n = int(run.overrides.get("steady_updates") or ctx.spec.phases.steady_updates)
    probe = probe_for(ctx, run)
    run.current_input = {"microbatch": trainer.args.per_device_train_batch_size, "updates": n + 1}
    t0 = time.perf_counter()
    loop.train_steps(trainer, n + 1, probe)
    total = time.perf_counter() - t0
    times = probe.step_times()[1:]
    losses = [r.get("loss", math.nan) for r in probe.ordered()]
    ordered = sorted(times)
    details: dict[str, Any] = {
        "updates": n,
        "warmup_updates": 1,
        "step_time_s": sum(times) / len(times) if times else math.nan,
        "step_time_p50_s": ordered[len(ordered) // 2] if ordered else math.nan,
        "step_time_p90_s": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))] if ordered else math.nan,
        "train_s": total,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "losses": losses,
        "lrs": [r.get("learning_rate") for r in probe.ordered()],
        "timed": "between consecutive step ends of the trainer's own loop (data, forward, backward, optimizer, logging)",
        "torch_threads": torch.get_num_threads(),
    }
    bad = next((i for i, v in enumerate(losses) if not finite(v)), None)
    if bad is not None:
        raise PhaseFailure(f"non-finite loss at steady update {bad + 1}", details)
    if losses[-1] >= losses[0]:
        return Outcome(
            WARN, f"loss did not fall over {n + 1} updates ({losses[0]:.4g} -> {losses[-1]:.4g})", details
        )
    return Outcome(PASS, f"{n} timed updates, {details['step_time_s'] * 1000:.1f} ms each", details)


@body("eval_longest")
@configured
def eval_longest(ctx: RunContext, run: PhaseRun) -> Outcome:
    trainer, adapter = trainer_of(ctx), adapter_of(ctx)
    if adapter.eval is None:
        return Outcome(
            WARN, "the script gives the trainer no eval_dataset: nothing evaluated", {"examples": 0}
        )
    k = max(1, min(len(adapter.eval), 2 * trainer.args.per_device_eval_batch_size))
    lengths = [adapter.length("eval", i) for i in range(len(adapter.eval))]
    longest = sorted(range(len(lengths)), key=lambda i: -lengths[i])[:k]
    ds = trainer.eval_dataset
    subset = ds.select(longest) if hasattr(ds, "select") else torch.utils.data.Subset(ds, longest)
    run.current_input = {"examples": k, "longest": max(lengths)}
    t0 = time.perf_counter()
    metrics = trainer.evaluate(eval_dataset=subset)
    seconds = time.perf_counter() - t0
    loss = metrics.get("eval_loss", math.nan)
    details = {
        "examples": k,
        "lengths": [lengths[i] for i in longest],
        "eval_loss": loss,
        "eval_s": seconds,
        "metrics": {key: v for key, v in metrics.items() if isinstance(v, int | float)},
    }
    if not finite(loss):
        raise PhaseFailure(f"non-finite eval loss on the {k} longest eval examples", details)
    return Outcome(
        PASS, f"evaluate() on the {k} longest eval examples ({max(lengths)} tokens): loss {loss:.4g}", details
    )


def _folder(path: Path) -> dict[str, Any]:
    files = sorted(p for p in path.rglob("*") if p.is_file())
    return {
        "path": str(path),
        "files": [str(p.relative_to(path)) for p in files],
        "size_mb": round(sum(p.stat().st_size for p in files) / 2**20, 3),
    }


@body("save")
def save(ctx: RunContext, run: PhaseRun) -> Outcome:
    """The trainer's own checkpoint code (`_save_checkpoint`): model, optimizer, scheduler, RNG, state."""
    trainer = trainer_of(ctx)
    if trainer.optimizer is None:
        raise PhaseFailure("no optimizer yet: first_step or steady must run before save")
    t0 = time.perf_counter()
    trainer._save_checkpoint(trainer.model, trial=None)
    seconds = time.perf_counter() - t0
    path = Path(trainer.args.output_dir) / f"checkpoint-{trainer.state.global_step}"
    if not path.is_dir():
        raise PhaseFailure(f"the trainer wrote no checkpoint folder at {path}")
    found = _folder(path)
    need = {"trainer_state.json", "optimizer.pt", "scheduler.pt"}
    missing = sorted(need - {Path(f).name for f in found["files"]})
    details = found | {"save_s": seconds, "step": trainer.state.global_step}
    if missing:
        raise PhaseFailure(f"the checkpoint lacks {', '.join(missing)}: a resume would not be exact", details)
    return Outcome(
        PASS,
        f"checkpoint of {found['size_mb']:.1f} MiB in {len(found['files'])} files, {seconds:.2f} s",
        details,
    )


def _control_prompt(tok: Any, text: str) -> list[int]:
    if getattr(tok, "chat_template", None):
        ids = tok.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        return [int(i) for i in ids]
    return [int(i) for i in tok(text)["input_ids"]]


def greedy(model: torch.nn.Module, prompt: list[int], stops: set[int], budget: int) -> list[int]:
    device = next(model.parameters()).device
    seq = torch.tensor([prompt], device=device)
    out: list[int] = []
    with torch.no_grad():
        for _ in range(budget):
            nxt = int(model(input_ids=seq).logits[0, -1].argmax())
            out.append(nxt)
            if nxt in stops:
                break
            seq = torch.cat([seq, torch.tensor([[nxt]], device=device)], 1)
    return out


def _probe_batch(adapter: Any) -> dict[str, torch.Tensor]:
    rows = adapter.eval if adapter.eval is not None else adapter.train
    return {k: v for k, v in rows.one(0).items() if k in ("input_ids", "attention_mask", "position_ids")}


def model_view(model: torch.nn.Module, adapter: Any, inputs: list[str], budget: int) -> dict[str, Any]:
    """What final compares after the reload: logits on one row, greedy replies to the controls."""
    was = model.training
    model.eval()
    device = next(model.parameters()).device
    with torch.no_grad():
        batch = {k: v.to(device) for k, v in _probe_batch(adapter).items()}
        logits = model(**batch).logits.float().cpu()
    replies = []
    if adapter.tokenizer is not None:
        for text in inputs:
            ids = greedy(model, _control_prompt(adapter.tokenizer, text), set(adapter.ends), budget)
            replies.append({"input": text, "ids": ids, "output": adapter.tokenizer.decode(ids)})
    model.train(was)
    return {"logits": logits, "controls": replies}


@body("export")
def export(ctx: RunContext, run: PhaseRun) -> Outcome:
    """`save_model`: the weights (the adapter alone for peft) and the tokenizer, as the script would."""
    trainer, adapter = trainer_of(ctx), adapter_of(ctx)
    path = ctx.work_dir / "trainer-export"
    t0 = time.perf_counter()
    trainer.save_model(str(path))
    seconds = time.perf_counter() - t0
    found = _folder(path)
    adapter_only = (path / "adapter_config.json").is_file()
    view = model_view(loop.unwrapped(trainer), adapter, ctx.spec.replay.inputs, 16)
    ctx.memo[EXPORT_MEMO] = {"path": path, "view": view, "adapter_only": adapter_only}
    details = found | {
        "export_s": seconds,
        "adapter_only": adapter_only,
        "controls": [{k: c[k] for k in ("input", "output")} for c in view["controls"]],
    }
    if not any(f.endswith((".safetensors", ".bin")) for f in found["files"]):
        raise PhaseFailure(f"save_model wrote no weights file in {path}", details)
    what = "the adapter alone" if adapter_only else "the model"
    return Outcome(PASS, f"save_model wrote {what}: {found['size_mb']:.1f} MiB, {seconds:.2f} s", details)


def reload_export(path: Path, adapter_only: bool, like: torch.nn.Module) -> torch.nn.Module:
    if adapter_only:
        # peft is in the hf extra, and only a trainer that trains an adapter needs it.
        from peft import AutoPeftModelForCausalLM

        return AutoPeftModelForCausalLM.from_pretrained(str(path))
    cls = type(like)
    return cls.from_pretrained(str(path))


@body("final")
def final(ctx: RunContext, run: PhaseRun) -> Outcome:
    """Reload the export with from_pretrained (+ the adapter) and compare with the model at export."""
    exported = ctx.memo.get(EXPORT_MEMO)
    if exported is None:
        raise PhaseFailure("export has not run in this runner: nothing to reload")
    trainer, adapter = trainer_of(ctx), adapter_of(ctx)
    t0 = time.perf_counter()
    model = reload_export(exported["path"], exported["adapter_only"], loop.unwrapped(trainer))
    model.to(loop.unwrapped(trainer).device)
    reload_s = time.perf_counter() - t0
    after = model_view(model, adapter, ctx.spec.replay.inputs, 16)
    before = exported["view"]
    diff = float((after["logits"] - before["logits"]).abs().max())
    changed = [
        {"input": b["input"], "before": b["output"], "after": a["output"]}
        for b, a in zip(before["controls"], after["controls"], strict=True)
        if b["ids"] != a["ids"]
    ]
    details = {
        "reload_s": reload_s,
        "logits_max_abs_diff": diff,
        "controls": [{"input": a["input"], "output": a["output"]} for a in after["controls"]],
        "controls_changed": changed,
        "reloaded": type(model).__name__,
    }
    if diff > 1e-5 or changed:
        what = f"{len(changed)} replayed replies changed" if changed else f"logits differ by up to {diff:.3g}"
        raise PhaseFailure(f"the reloaded export is not the model that was exported: {what}", details)
    controls = f", {len(after['controls'])} replayed replies identical" if after["controls"] else ""
    return Outcome(PASS, f"reloaded with from_pretrained: logits identical{controls}", details)
