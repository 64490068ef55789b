"""The phase bodies of a trainer campaign: every gate on the captured trainer's own parts.

Same phase names and rows as any campaign (the phase table is unchanged); `BODIES` replaces the
registered bodies for a campaign whose task is a `trainer_script`. What each runs:
docs/trainer.md.
"""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ...analysis.checks import Check, CheckResult, verdict_of
from ..context import RunContext
from ..fresh_process import FreshProcessFailed, start_fresh_process
from ..inspection import ModelOutput, inspect_task
from ..phases.base import FAIL, PASS, WARN, Outcome, PhaseFailure, PhaseRun, finite
from ..phases.inspect import with_task_checks
from ..phases.load import tensor_mb
from ..phases.stack import stack as stack_body
from . import loop
from .batches import loader_view
from .probe import StepProbe, parameter_digest
from .settings import RESUME_REFUSED

Body = Callable[[RunContext, PhaseRun], Outcome]
BODIES: dict[str, Body] = {"stack": stack_body}
INITIAL = "trainer_initial_weights"
EXPORT_MEMO = "trainer_export"


def body(name: str) -> Callable[[Body], Body]:
    def register(fn: Body) -> Body:
        BODIES[name] = fn
        return fn

    return register


def _t(ctx: RunContext) -> Any:
    return ctx.adapter.trainer  # type: ignore[attr-defined]


def _a(ctx: RunContext) -> Any:
    return ctx.adapter  # type: ignore[attr-defined]


def probe_for(ctx: RunContext, run: PhaseRun, **kwargs: Any) -> StepProbe:
    """A step probe that reports the phase's progress and stops the trainer's loop on a cancel
    or at the phase's time ceiling (the check raises inside the loop, which unwinds it)."""

    def on_step(step: int, total: int, loss: float | None) -> None:
        ctx.progress(run.step.key, step, total, loss)
        ctx.check_cancel()

    return StepProbe(on_step=on_step, **kwargs)


def _from_start(ctx: RunContext) -> None:
    """Weights as captured, a fresh optimizer and schedule: a gate that is a run starts there."""
    trainer = _t(ctx)
    loop.restore(loop.unwrapped(trainer), ctx.memo[INITIAL])
    loop.fresh_optimizer(trainer)


def _output_size(model: torch.nn.Module) -> ModelOutput:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and getattr(head, "weight", None) is not None:
        return ModelOutput(int(head.weight.shape[0]), how="output embeddings")
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    return (
        ModelOutput(int(size), how="config.vocab_size") if size else ModelOutput(None, "no output size found")
    )


@body("load")
def load(ctx: RunContext, run: PhaseRun) -> Outcome:
    trainer, cap = _t(ctx), ctx.memo["trainer_capture"]
    model = loop.unwrapped(trainer)
    params = list(model.parameters())
    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise PhaseFailure(f"non-finite weights after the script built the model: {', '.join(bad[:5])}")
    trainable = sum(p.numel() for p in params if p.requires_grad)
    a = trainer.args
    details = {
        "script": cap["script"],
        "argv": cap["argv"],
        "capture_s": round(cap["seconds"], 3),
        "capture_rss_mb": cap["rss_mb"],
        "what_ran": "everything the script did before train(): model load, tokenisation, packing",
        "trainer": type(trainer).__name__,
        "model": type(model).__name__,
        "parameters": sum(p.numel() for p in params),
        "trainable_parameters": trainable,
        "weights_mb": round(tensor_mb(params), 3),
        "dtype": str(params[0].dtype).removeprefix("torch.") if params else "",
        "trainable": f"{trainable:,} of {sum(p.numel() for p in params):,} parameters trainable",
        "train_examples": len(_a(ctx).train),
        "eval_examples": len(_a(ctx).eval) if _a(ctx).eval is not None else 0,
        "per_device_train_batch_size": a.per_device_train_batch_size,
        "gradient_accumulation_steps": a.gradient_accumulation_steps,
        "learning_rate": a.learning_rate,
        "lr_scheduler_type": str(getattr(a.lr_scheduler_type, "value", a.lr_scheduler_type)),
        "optim": str(getattr(a.optim, "value", a.optim)),
        "precision": "bf16" if a.bf16 else "fp16" if a.fp16 else "fp32",
        "activation_checkpointing": loop.checkpointing(a),
        "collator": getattr(trainer.data_collator, "__name__", type(trainer.data_collator).__name__),
        "pilot_changed": cap["changes"],
        "versions": cap["versions"],
    }
    if cap["train_kwargs"]:
        details["train_called_with"] = {k: str(v) for k, v in cap["train_kwargs"].items()}
    reason = (
        f"captured {type(trainer).__name__} in {cap['seconds']:.2f} s (everything before train()); "
        f"the pilot changed {len(cap['changes'])} settings"
    )
    return Outcome(PASS, reason, details, duration_s=round(cap["seconds"], 4))


@body("inspect")
def inspect(ctx: RunContext, run: PhaseRun) -> Outcome:
    adapter, trainer = _a(ctx), _t(ctx)
    show = int(run.overrides.get("inspect_examples") or ctx.spec.inspect.examples)
    run.current_input = {"examples": len(adapter.train), "split": "train"}
    result = inspect_task(
        adapter.task,
        max_length=0,
        supervise_prompt=ctx.spec.task.supervise_prompt,
        declared_names=[],
        show=show,
        microbatch=1,
        splits={"train": ctx.splits["train"]},
        output=_output_size(loop.unwrapped(trainer)),
    )
    result = with_task_checks(ctx, result)
    view = loader_view(trainer, adapter, show)
    checks = [*_checks(result), *view.checks]
    verdict, reason = verdict_of(checks)
    details = result.details | {
        "checks": [c.as_dict() for c in checks],
        "examples": view.examples,
        "loader_windows": view.windows,
        "legend": view.legend,
        "examples_scanned": len(adapter.train),
    }
    return Outcome(verdict, reason, details, params={"inspect_examples": show})


def _checks(result: CheckResult) -> list[Check]:
    return [
        Check(r["name"], r["verdict"], r["message"], r.get("count", 0), r.get("ids", []))
        for r in result.details.get("checks", [])
    ]


def _input_digest(batch: dict[str, torch.Tensor]) -> str:
    ids = batch["input_ids"].reshape(-1)
    return json.dumps(ids.tolist())


@body("split")
def split(ctx: RunContext, run: PhaseRun) -> Outcome:
    adapter = _a(ctx)
    if adapter.eval is None:
        return Outcome(
            WARN, "the script gives the trainer no eval_dataset: nothing to compare", {"eval_examples": 0}
        )
    run.current_input = {"train": len(adapter.train), "eval": len(adapter.eval)}
    seen: dict[str, int] = {}
    for i in range(len(adapter.train)):
        ctx.check_cancel()
        seen.setdefault(_input_digest(adapter.train.one(i)), i)
    same = []
    for j in range(len(adapter.eval)):
        k = seen.get(_input_digest(adapter.eval.one(j)))
        if k is not None:
            same.append((j, k))
    details: dict[str, Any] = {
        "train_examples": len(adapter.train),
        "eval_examples": len(adapter.eval),
        "same_input": len(same),
        "pairs": [{"eval": j, "train": k} for j, k in same[:10]],
    }
    if same:
        j, k = same[0]
        return Outcome(
            FAIL,
            f"{len(same)} of {len(adapter.eval)} eval examples have inputs identical to a train example "
            f"(eval[{j}] = train[{k}]): evaluation measures memorisation",
            details,
        )
    return Outcome(
        PASS, f"no eval example has the inputs of a train example ({len(adapter.eval)} compared)", details
    )


@body("overfit")
def overfit(ctx: RunContext, run: PhaseRun) -> Outcome:
    """`training_step` (their compute_loss and normaliser) on a tiny subset, a plain AdamW at
    `overfit.lr` stepping it; the captured weights are put back afterwards."""
    trainer, adapter, o = _t(ctx), _a(ctx), ctx.spec.overfit
    model = trainer.model
    m = min(o.examples, len(adapter.train))
    rows = [adapter.train.dataset[i] for i in range(m)]
    batch = adapter.train.collate_fn(rows)
    run.current_input = {"examples": m}
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=o.lr)
    losses: list[float] = []
    try:
        for step in range(o.max_steps):
            ctx.check_cancel()
            model.zero_grad(set_to_none=True)
            num = trainer._get_num_items_in_batch([batch], trainer.args.device)
            trainer.current_gradient_accumulation_steps = 1
            loss = float(trainer.training_step(model, batch, num))
            opt.step()
            losses.append(loss)
            ctx.progress(run.step.key, step + 1, o.max_steps, loss)
            if not finite(loss) or loss < o.loss_below:
                break
        recovered = _recovered(model, trainer, batch)
    finally:
        del opt
        loop.restore(loop.unwrapped(trainer), ctx.memo[INITIAL])
    details = {
        "examples": m,
        "steps": len(losses),
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "losses": losses[:: max(1, len(losses) // 50)],
        "recovered": recovered,
        "loss_below": o.loss_below,
        "recover": o.recover,
        "lr": o.lr,
        "weights": "put back to the captured ones after the phase",
    }
    if not finite(losses[-1]):
        raise PhaseFailure(f"non-finite loss at overfit step {len(losses)}", details)
    if losses[-1] < o.loss_below or recovered >= o.recover:
        return Outcome(
            PASS,
            f"{m} examples learnt in {len(losses)} steps: loss {losses[0]:.3g} -> {losses[-1]:.3g}, "
            f"argmax recovers {recovered:.0%} of the scored tokens",
            details,
        )
    raise PhaseFailure(
        f"{m} examples not learnt in {len(losses)} steps: loss {losses[0]:.3g} -> {losses[-1]:.3g} "
        f"(needs < {o.loss_below:g}), argmax recovers {recovered:.0%} of the scored tokens (needs {o.recover:.0%})",
        details,
    )


def _recovered(model: torch.nn.Module, trainer: Any, batch: dict[str, Any]) -> float:
    model.eval()
    with torch.no_grad():
        inputs = trainer._prepare_inputs(dict(batch))
        labels = inputs.pop("labels")
        logits = model(**inputs).logits
    model.train()
    pred, target = logits[:, :-1].argmax(-1), labels[:, 1:]
    scored = target != -100
    return float((pred == target)[scored].float().mean()) if scored.any() else 0.0


def _accumulation_rows(ctx: RunContext) -> list[Any]:
    a = _t(ctx).args
    n = max(2, min(8, a.per_device_train_batch_size * a.gradient_accumulation_steps))
    train = _a(ctx).train
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
        with loop.batch_settings(_t(ctx), cfg.microbatch, cfg.accumulation, cfg.activation_checkpointing):
            return fn(ctx, run)

    return run_configured


@body("first_step")
@configured
def first_step(ctx: RunContext, run: PhaseRun) -> Outcome:
    trainer, adapter = _t(ctx), _a(ctx)
    _from_start(ctx)
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
    trainer = _t(ctx)
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
    trainer, adapter = _t(ctx), _a(ctx)
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
    trainer = _t(ctx)
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
    trainer, adapter = _t(ctx), _a(ctx)
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
    trainer, adapter = _t(ctx), _a(ctx)
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


# --------------------------------------------------------------------------------------------
# resume: run A here, run C in a new process that captures the same script again


def resume_causes(trainer: Any) -> tuple[list[str], list[str]]:
    """(refusals, known library causes of inexactness) for this trainer's settings."""
    import transformers
    from packaging.version import Version

    a = trainer.args
    refused = [f"{k} = true: {why}" for k, why in RESUME_REFUSED.items() if getattr(a, k, False)]
    causes = []
    if Version(transformers.__version__) < Version("5.0"):
        causes.append(
            f"transformers {transformers.__version__} < 5.0: resume inside epoch ≥ 1 reads another data order "
            "and skips the last accumulation window (fixed in 5.0)"
        )
    if a.dataloader_num_workers > 0:
        causes.append(
            f"dataloader_num_workers = {a.dataloader_num_workers}: worker seeds differ after a resume"
        )
    sampling = getattr(
        a, "train_sampling_strategy", "group_by_length" if getattr(a, "group_by_length", False) else ""
    )
    if sampling in ("group_by_length", "batch_rebalance"):
        causes.append(f"{sampling} sampling: the length-grouped sampler draws from the global RNG")
    collator = trainer.data_collator
    if getattr(collator, "mlm", False):
        causes.append(
            f"{type(collator).__name__} masks at random: the first window after a resume draws another mask "
            "(RNG restored after the window is fetched)"
        )
    return refused, causes


COMPARED = ("loss", "grad_norm", "learning_rate", "digest")


def compare_steps(
    a_rows: dict[int, dict[str, Any]], c_rows: dict[int, dict[str, Any]], steps: range
) -> tuple[list[dict[str, Any]], tuple[int, list[str]] | None]:
    """Per step, whether run C logged exactly run A's values; and the first step that differs.
    A value missing on either side is a difference, never two Nones compared equal."""
    compared, first = [], None
    for step in steps:
        a, c = a_rows.get(step, {}), c_rows.get(step, {})
        same = {key: a.get(key) is not None and a.get(key) == c.get(key) for key in COMPARED}
        compared.append(
            {
                "step": step,
                **{f"{key}_same": v for key, v in same.items()},
                "loss_a": a.get("loss"),
                "loss_c": c.get("loss"),
            }
        )
        if first is None and not all(same.values()):
            first = (step, [key for key, v in same.items() if not v])
    return compared, first


def _hexes(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (float(v).hex() if isinstance(v, float) else v) for k, v in row.items()}


@body("resume")
def resume(ctx: RunContext, run: PhaseRun) -> Outcome:
    trainer = _t(ctx)
    k, n = ctx.spec.resume.k, ctx.spec.resume.n
    refused, causes = resume_causes(trainer)
    if refused:
        raise PhaseFailure("a resume test would mean nothing: " + "; ".join(refused), {"refused": refused})
    out = ctx.work_dir / "trainer-resume"
    saved_dir = trainer.args.output_dir
    trainer.args.output_dir = str(out / "run-a")
    _from_start(ctx)
    probe = probe_for(ctx, run, save_at=(k,), digest=True)
    run.current_input = {"k": k, "n": n, "run": "A (this process)"}
    try:
        loop.train_steps(trainer, k + n, probe)
    finally:
        trainer.args.output_dir = saved_dir
    checkpoint = out / "run-a" / f"checkpoint-{k}"
    if not checkpoint.is_dir():
        raise PhaseFailure(f"run A saved no checkpoint at step {k} ({checkpoint})")
    a_rows = {r["step"]: _hexes(r) for r in probe.ordered()}
    run.current_input = {"k": k, "n": n, "run": "C (a new process)"}
    c_dir = out / "run-c"
    worker = start_fresh_process(
        "pilot_tui.runner.trainer.resume_worker",
        [
            "--spec", str(ctx.loaded.path),
            "--spec-sha256", ctx.loaded.sha256,
            "--script-sha256", ctx.memo["trainer_capture"]["script_sha256"],
            "--threads", str(torch.get_num_threads()),
            "--out", str(c_dir),
            "--checkpoint", str(checkpoint),
            "--steps", str(k + n),
        ],
        c_dir,
    )  # fmt: skip
    try:
        result, seconds = worker.wait(ctx, timeout_s=ctx.spec.limit_for("resume").time_s or 900.0)
    except FreshProcessFailed as exc:
        raise PhaseFailure(f"the resumed process failed: {exc}", {"stderr": exc.stderr}) from None
    c_rows = {int(r["step"]): r for r in result["rows"]}
    compared, first_diff = compare_steps(a_rows, c_rows, range(k + 1, k + n + 1))
    details: dict[str, Any] = {
        "k": k,
        "n": n,
        "checkpoint": str(checkpoint),
        "steps": compared,
        "resume_process_s": seconds,
        "causes": causes,
        "compared": "loss, grad_norm, learning_rate (float.hex) and a sha256 of every parameter, per step",
    }
    if first_diff is not None:
        step, keys = first_diff
        named = f"; known causes in this setup: {'; '.join(causes)}" if causes else ""
        raise PhaseFailure(
            f"the resumed run differs from the uninterrupted one from step {step} ({', '.join(keys)}) "
            f"after resuming at step {k}{named}",
            details,
        )
    if len(c_rows) < n:
        raise PhaseFailure(f"the resumed process logged {len(c_rows)} of {n} steps", details)
    note = f" (warn: {'; '.join(causes)})" if causes else ""
    return Outcome(
        WARN if causes else PASS,
        f"resumed at step {k} in a new process: steps {k + 1}…{k + n} bitwise identical (loss, grad norm, LR, "
        f"weights){note}",
        details,
    )


def captured_digest(trainer: Any) -> str:
    return parameter_digest(loop.unwrapped(trainer))
