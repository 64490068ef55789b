"""The engine gates on a captured trainer: its own `train()` for the first update (after the
accumulation check; steady is `steady_gate.py`), `evaluate()` on the longest rows, its own checkpoint,
`save_model` and the reload of what it exported."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch

from ....core.verdict import PASS, WARN
from ....tasks.contract import CAUSAL_LM
from ...checks.objective_checks import ACCUMULATION_RTOL
from ...context import Outcome, PhaseFailure, PhaseRun, RunContext, finite
from ...distributed import state as dist_state
from ...memory.probes import tensor_mb
from ...processes.fresh_process import FreshProcessFailed, read_tensors
from . import loop, replay
from .captured import EXPORT_MEMO, adapter_of, from_start, probe_for, trainer_of
from .ranks import require_agreement
from .reload_process import start_reload, taken_ahead


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


def first_step(ctx: RunContext, run: PhaseRun) -> Outcome:
    trainer, adapter = trainer_of(ctx), adapter_of(ctx)
    require_agreement(ctx)
    from_start(ctx)
    rows = _accumulation_rows(ctx)
    run.current_input = {"accumulation_check_examples": len(rows)}
    # The tolerance the run's precision explains: half-precision weights or autocast round each
    # microbatch's sums, so the two groupings differ by more than fp32's reordering (1e-3).
    precision = loop.compute_precision(trainer)
    tolerance = ACCUMULATION_RTOL[precision]
    collate = adapter.train.collate_fn
    check, items = loop.accumulation_check(trainer, rows, collate, adapter.kind, tolerance=tolerance)
    cured = None
    if not check.ok:
        with loop.as_cured(trainer) as flagged:
            if flagged:
                cured, _ = loop.accumulation_check(trainer, rows, collate, adapter.kind, tolerance=tolerance)
    world = dist_state.world()
    scaled = loop.rank_loss_scale(trainer, rows, adapter.train.collate_fn) if world > 1 else {}
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
        # DistributedDataParallel on several ranks: the trainer wrapped its own model.
        "trained_as": type(trainer.model_wrapped).__name__,
        "accumulation": check.as_dict() | items | ({"cured": cured.as_dict()} if cured is not None else {}),
        "ran": "the trainer's own train() for max_steps = 1",
    } | ({"rank_loss_scale": scaled} if scaled else {})
    scale = scaled.get("scale")
    if scale is not None and abs(scale - 1.0) > 1e-3:
        raise PhaseFailure(
            f"on {world} ranks the same rows' loss is {scale:.3g} × their one-process loss: compute_loss "
            "divides by num_items_in_batch, which the trainer counts over every rank "
            f"(average_tokens_across_devices), and does not multiply by the {world} processes as "
            f"Trainer.compute_loss does: loss and gradients are {scale:.3g} × the intended",
            details,
        )
    warning = ""
    if not check.ok:
        accumulation = int(trainer.args.gradient_accumulation_steps)
        said = accumulation_said(check, adapter.kind.unit, loop.loss_owner(trainer), cured)
        cure = loop.loss_cure(trainer, adapter.kind.unit)
        if accumulation > 1:
            raise PhaseFailure(
                f"this run accumulates {accumulation} microbatches per update and {said}: its updates weigh "
                f"microbatches, not {adapter.kind.unit}. The cure, in the script: {cure}",
                details,
            )
        # The run itself does not accumulate: its updates are right. Said, for the day it does.
        warning = (
            f"this run does not accumulate (accumulation 1), so its updates are right; but {said}: at "
            f"accumulation a > 1 (a smaller microbatch, a memory variant) each update would weigh "
            f"microbatches, not {adapter.kind.unit}. Before raising it, in the script: {cure}"
        )
    if not finite(loss) or not finite(gn):
        raise PhaseFailure(
            f"non-finite {'loss' if not finite(loss) else 'gradient norm'} at the first update", details
        )
    if warning:
        return Outcome(WARN, warning, details)
    within = (
        f", within {tolerance:g}: {precision} rounds each microbatch's sums" if precision != "fp32" else ""
    )
    return Outcome(
        PASS,
        f"first update loss {loss:.4g}, grad norm {gn:.3g}; accumulation check: the same update cut into "
        f"microbatches gives the same gradient ({check.grad_rel_diff:.1e} apart{within})",
        details,
    )


def accumulation_said(check: Any, unit: str, owner: str, cured: Any) -> str:
    """What the accumulation check measured, in the kind's words, with the cure's own measure."""
    (m, _), (_, a) = check.wide, check.narrow
    said = (
        f"the same {m} {unit} give {check.factor:.3g}× the gradient cut into {a} microbatches as in one "
        f"(loss {check.loss_narrow:.4g} vs {check.loss_wide:.4g}; the loss is {owner})"
    )
    if cured is not None:
        said += f"; with trainer.model_accepts_loss_kwargs = False, {cured.factor:.3g}× " + (
            "(the same update)" if cured.ok else "(still off: the loss averages each microbatch)"
        )
    return said


def _subset(ds: Any, rows: list[int]) -> Any:
    return ds.select(rows) if hasattr(ds, "select") else torch.utils.data.Subset(ds, rows)


def eval_longest(ctx: RunContext, run: PhaseRun) -> Outcome:
    """`evaluate()` on the longest rows of each eval set: one dataset, or each entry of a dict
    under its own metric prefix (`eval_a_loss`), as the trainer evaluates them."""
    trainer, adapter = trainer_of(ctx), adapter_of(ctx)
    if not adapter.eval_sets:
        return Outcome(
            WARN, "the script gives the trainer no eval_dataset: nothing evaluated", {"examples": 0}
        )
    per_set: dict[str, dict[str, Any]] = {}
    # One dataset is evaluated as itself; a dict as a dict (each under its own metric prefix).
    chosen: dict[str, Any] = {}
    single: Any = None
    for split, (key, rows) in adapter.eval_sets.items():
        k = max(1, min(len(rows), 2 * trainer.args.per_device_eval_batch_size))
        lengths = [adapter.length(split, i) for i in range(len(rows))]
        longest = sorted(range(len(lengths)), key=lambda i, n=lengths: -n[i])[:k]
        ds = trainer.eval_dataset if key is None else trainer.eval_dataset[key]
        if key is None:
            single = _subset(ds, longest)
        else:
            chosen[key] = _subset(ds, longest)
        per_set[split] = {"examples": k, "lengths": [lengths[i] for i in longest]}
    longest_row = max(max(d["lengths"]) for d in per_set.values())
    total = sum(d["examples"] for d in per_set.values())
    run.current_input = {"examples": total, "longest": longest_row}
    t0 = time.perf_counter()
    metrics = trainer.evaluate(eval_dataset=single if single is not None else chosen)
    seconds = time.perf_counter() - t0
    for split, d in per_set.items():
        d["eval_loss"] = metrics.get(f"{split}_loss", math.nan)
    details: dict[str, Any] = {
        "examples": total,
        "lengths": [n for d in per_set.values() for n in d["lengths"]],
        "eval_s": seconds,
        "metrics": {key: v for key, v in metrics.items() if isinstance(v, int | float)},
    }
    if len(per_set) == 1:
        details["eval_loss"] = next(iter(per_set.values()))["eval_loss"]
    else:
        details["eval_sets"] = per_set
    bad = [split for split, d in per_set.items() if not finite(d["eval_loss"])]
    if bad:
        raise PhaseFailure(f"non-finite eval loss on the longest examples of {', '.join(bad)}", details)
    losses = ", ".join(f"{split} {d['eval_loss']:.4g}" for split, d in per_set.items())
    where = f"the {total} longest eval examples" + (
        f" ({len(per_set)} sets, each's own)" if len(per_set) > 1 else ""
    )
    return Outcome(PASS, f"evaluate() on {where} ({longest_row} tokens): loss {losses}", details)


def _folder(path: Path) -> dict[str, Any]:
    files = sorted(p for p in path.rglob("*") if p.is_file())
    return {
        "path": str(path),
        "files": [str(p.relative_to(path)) for p in files],
        "size_mb": round(sum(p.stat().st_size for p in files) / 2**20, 3),
    }


def save(ctx: RunContext, run: PhaseRun) -> Outcome:
    """The trainer's own checkpoint code (`_save_checkpoint`): model, optimizer, scheduler, RNG, state."""
    trainer = trainer_of(ctx)
    if trainer.optimizer is None:
        raise PhaseFailure("no optimizer yet: first_step or steady must run before save")
    t0 = time.perf_counter()
    trainer._save_checkpoint(trainer.model, trial=None)
    dist_state.barrier()  # on several ranks rank 0 writes the model and optimizer: wait for it
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


def _probe_batch(adapter: Any) -> dict[str, torch.Tensor]:
    rows = adapter.eval if adapter.eval is not None else adapter.train
    # An encoder-decoder's logits need decoder inputs: it builds them from the row's labels.
    keys = ("input_ids", "attention_mask", "position_ids") + (("labels",) if adapter.encoder_decoder else ())
    return {k: v for k, v in rows.one(0).items() if k in keys}


def export(ctx: RunContext, run: PhaseRun) -> Outcome:
    """`save_model`: the weights (the adapter alone for peft) and the tokenizer, as the script would."""
    trainer, adapter = trainer_of(ctx), adapter_of(ctx)
    path = ctx.work_dir / "trainer-export"
    t0 = time.perf_counter()
    trainer.save_model(str(path))
    dist_state.barrier()  # rank 0 alone writes the export
    seconds = time.perf_counter() - t0
    found = _folder(path)
    adapter_only = (path / "adapter_config.json").is_file()
    # What final compares: the exported model's logits on one row and its replies to the inputs.
    batch = _probe_batch(adapter)
    tok, inputs = adapter.tokenizer, list(ctx.spec.replay.inputs)
    generates = adapter.kind.task_kind == CAUSAL_LM
    prompts = [replay.prompt_ids(tok, text, chat=generates) for text in inputs] if tok is not None else []
    logits, replies = replay.view(loop.unwrapped(trainer), batch, prompts, set(adapter.ends))
    ctx.memo[EXPORT_MEMO] = {
        "path": path,
        "adapter_only": adapter_only,
        "batch": batch,
        "prompts": prompts,
        "logits": logits,
        "replies": replies,
        "inputs": inputs[: len(prompts)],
        "model_class": type(loop.unwrapped(trainer)).__name__,
    }
    details = found | {
        "export_s": seconds,
        "adapter_only": adapter_only,
        "controls": [
            {"input": t, "output": _reply(adapter, r)} for t, r in zip(inputs, replies, strict=False)
        ],
    }
    if not any(f.endswith((".safetensors", ".bin")) for f in found["files"]):
        raise PhaseFailure(f"save_model wrote no weights file in {path}", details)
    what = "the adapter alone" if adapter_only else "the model"
    return Outcome(PASS, f"save_model wrote {what}: {found['size_mb']:.1f} MiB, {seconds:.2f} s", details)


def _decode(tok: Any, ids: list[int]) -> str:
    return tok.decode(ids) if tok is not None else " ".join(map(str, ids))


def _reply(adapter: Any, ids: list[int]) -> str:
    """A replayed reply as words: a classifier's class by its name, a generated reply decoded."""
    names = list(adapter.kind.class_names)
    if adapter.kind.classifier and len(ids) == 1 and 0 <= ids[0] < len(names):
        return f"{ids[0]} {names[ids[0]]}"
    return _decode(adapter.tokenizer, ids)


def final(ctx: RunContext, run: PhaseRun) -> Outcome:
    """The export reloaded with from_pretrained (+ the adapter) in a new process: its logits and
    replies must be the exported model's."""
    exported = ctx.memo.get(EXPORT_MEMO)
    if exported is None:
        raise PhaseFailure("export has not run in this runner: nothing to reload")
    ahead = taken_ahead(ctx, str(exported["path"]))
    worker = ahead.worker if ahead is not None else start_reload(ctx, exported)
    run.current_input = {"export": str(exported["path"])}
    try:
        said = (run.step.key, 0, 1, "reloading the export with from_pretrained in a new process")
        result, seconds = worker.wait(ctx, timeout_s=ctx.spec.limit_for("final").time_s or 600.0, said=said)
    except FreshProcessFailed as exc:
        raise PhaseFailure(f"the reload in a new process failed: {exc}", {"stderr": exc.stderr}) from None
    logits = read_tensors(result)["logits"]
    diff = (
        float((logits - exported["logits"]).abs().max())
        if logits.shape == exported["logits"].shape
        else math.inf
    )
    changed = [
        {"input": t, "before": _reply(adapter_of(ctx), b), "after": _reply(adapter_of(ctx), a)}
        for t, b, a in zip(exported["inputs"], exported["replies"], result["replies"], strict=True)
        if b != a
    ]
    details = {
        "reload_process_s": seconds,
        "reload_process_start": result.get("process_start", ""),
        "reload_process_ahead": (
            f"started beside {' · '.join(ahead.beside)}, once the export existed" if ahead is not None else ""
        ),
        "logits_max_abs_diff": diff,
        "controls": [
            {"input": t, "output": _reply(adapter_of(ctx), a)}
            for t, a in zip(exported["inputs"], result["replies"], strict=True)
        ],
        "controls_changed": changed,
        "reloaded": result["model"],
    }
    if diff > 1e-5 or changed:
        what = f"{len(changed)} replayed replies changed" if changed else f"logits differ by up to {diff:.3g}"
        raise PhaseFailure(
            f"the export reloaded in a new process is not the model that was exported: {what}", details
        )
    served = result.get("served", {})
    details["served_alone"] = served
    fails, warns = serving_problems(served, adapter_of(ctx), exported["adapter_only"])
    if fails:
        raise PhaseFailure("the export cannot be served alone: " + "; ".join(fails), details)
    replies = f", {len(result['replies'])} replayed replies identical" if result["replies"] else ""
    if warns:
        return Outcome(WARN, "; ".join(warns), details)
    return Outcome(
        PASS, f"reloaded with from_pretrained in a new process: logits identical{replies}", details
    )


def serving_problems(served: dict[str, Any], adapter: Any, adapter_only: bool) -> tuple[list[str], list[str]]:
    """(what stops the exported folder from being served alone, what serves it wrong), each with
    the line of the script that would mend it."""
    fails, warns = [], []
    if "tokenizer_error" in served:  # every kind the pilot reads is text: a server tokenises it
        fails.append(
            f"the folder holds no tokenizer a server can load ({served['tokenizer_error']}): pass "
            "processing_class=tokenizer to the Trainer (save_model then saves it), or call "
            "tokenizer.save_pretrained(output_dir) after it"
        )
    trained_template = bool(getattr(adapter.tokenizer, "chat_template", None))
    if trained_template and served.get("tokenizer") and not served.get("chat_template"):
        fails.append(
            "the tokenizer in the folder has no chat template, though training rendered chats with one: "
            "set tokenizer.chat_template before saving it"
        )
    if "generation_config_error" in served:
        fails.append(
            f"generation_config.json fails transformers' strict validation ({served['generation_config_error']}): "
            "the first save_pretrained of a long run raises on it — fix model.generation_config in the script"
        )
    if served.get("empty_tensors"):
        fails.append(
            f"empty weights in the folder ({', '.join(served['empty_tensors'][:3])}): a sharded final save "
            "wrote placeholders (gather the full state dict before save_model)"
        )
    if adapter.kind.task_kind != CAUSAL_LM:
        return fails, warns  # a classifier generates nothing: its stops and cache do not serve it
    stops = served.get("generation_eos") or served.get("config_eos") or []
    missing = [e for e in served.get("ends", []) if e not in stops]
    if stops and missing and not adapter_only:
        names = ", ".join(repr(adapter.decode(e)) for e in missing)
        warns.append(
            f"the served model stops at eos {stops} but training ends turns with {names}: generation runs "
            "past the end of its turn — add them to model.generation_config.eos_token_id before saving"
        )
    if served.get("generation_use_cache") is False:
        # generate() reads the generation config's use_cache; the model config's (which the
        # Trainer sets from TrainingArguments.use_cache, False by default) it does not.
        warns.append(
            "generation_config.use_cache = false is saved with the export: generate() recomputes every "
            "token — set model.generation_config.use_cache = True before save_model"
        )
    return fails, warns
