"""`save` (full training checkpoint) and `export` (inference weights in safetensors)."""

from __future__ import annotations

from pathlib import Path

from ....core.events import RecordUpdate
from ....core.hashing import artifact_entry
from ....core.verdict import WARN
from ...checks import finiteness
from ...context import Outcome, PhaseFailure, PhaseRun, RunContext
from ...distributed import state as dist_state
from ...distributed.sharded import kind_for, verify_sharded
from ...loop.checkpoint import export_weights, load_training_state, load_weights, save_training_state
from ...loop.replay import replay_inputs
from ...loop.replay_store import save_replays
from ...loop.serving_check import config_warnings
from ...loop.training import TrainState

CHECKPOINT_KEYS = ("model", "optimizer", "scheduler", "scaler", "rng", "data", "step")
FORMATS = {"sharded": "torch.distributed.checkpoint", "full": "torch.save"}


def unused_path(path: Path) -> Path:
    """A name no earlier attempt used: a recorded artifact is never overwritten (R14)."""
    candidate, i = path, 1
    while candidate.exists():
        i += 1
        candidate = path.with_name(f"{path.stem}-{i}{path.suffix}")
    return candidate


def _record_artifact(ctx: RunContext, entry: dict) -> None:
    ctx.emit(RecordUpdate(section="artifacts", value=entry))


def _finite_state(
    ctx: RunContext, run: PhaseRun, what: str, overrides: dict | None = None
) -> tuple[str, TrainState]:
    """The step's variant and its training state (under `overrides`, default the step's own),
    refused when a weight is not finite.

    Finiteness first: a NaN never equals itself, so comparing a diverged model bitwise would
    report "weights differ" instead of the cause; and a NaN model is not worth a file."""
    variant = run.step.variant
    state = ctx.state(variant, ctx.config(variant, run.overrides if overrides is None else overrides))
    reason = finiteness.weights_not_finite(state.model, ctx.memo, variant)
    if reason:
        raise PhaseFailure(f"{reason}: nothing worth a {what} (finiteness checked before any comparison)")
    return variant, state


def checkpoint_kind(ctx: RunContext, strategy: str, overrides: dict) -> str:
    """sharded | full: the override, the declared `[distributed] checkpoint`, else by strategy."""
    return kind_for(str(overrides.get("checkpoint") or ctx.spec.distributed.checkpoint), strategy)


def save(ctx: RunContext, run: PhaseRun) -> Outcome:
    overrides = {k: v for k, v in run.overrides.items() if k != "checkpoint"}
    variant, state = _finite_state(ctx, run, "save", overrides)
    kind = checkpoint_kind(ctx, state.config.strategy, run.overrides)
    # A rerun at the same step gets a new name: an earlier artifact entry keeps its file (R14).
    suffix = ".dcp" if kind == "sharded" else ".pt"
    path = dist_state.from_rank0(unused_path(ctx.work_dir / f"checkpoint-{variant}-step{state.step}{suffix}"))
    written = save_training_state(state, path, kind)
    entry = artifact_entry(
        path, "training_checkpoint", phase="save", variant=variant, step=state.step, format=FORMATS[kind]
    )
    if dist_state.is_rank0():
        _record_artifact(ctx, entry)
    # The save is only as good as its reload: read it back with the safe rules (R17).
    if kind == "sharded":
        differ = verify_sharded(state, path, entry)  # each rank its own shards, bitwise
        if differ:
            raise PhaseFailure(
                f"reloaded shards differ from this rank's state: {', '.join(differ[:5])}", {"artifact": entry}
            )
    else:
        _verify_full(state, path, entry)
    return Outcome(
        details={
            "artifact": entry,
            "checkpoint": kind,
            "contents": list(CHECKPOINT_KEYS),
            "step": state.step,
            "size_mb": round(entry["size"] / 2**20, 3),
            # The write alone (the read-back check is not part of a real run's save): what the plan
            # multiplies by the number of checkpoints, the slowest rank's on several ranks.
            "save_s": written["save_s"],
            "written_mb": written["written_mb"],
        }
    )


def _verify_full(state, path, entry: dict) -> None:
    saved = load_training_state(path, entry)
    missing = [k for k in CHECKPOINT_KEYS if k not in saved]
    if missing:
        raise PhaseFailure(f"checkpoint lacks {', '.join(missing)}", {"artifact": entry})
    model = dist_state.model_state(state.model)  # full weights under the user's names, on every rank
    differ = [
        k
        for k, v in model.items()
        if k not in saved["model"] or not finiteness.finite_equal(saved["model"][k], v.cpu())
    ]
    if differ or set(saved["model"]) != set(model):
        raise PhaseFailure(
            f"reloaded checkpoint weights differ from the saved model: {', '.join(differ[:5])}",
            {"artifact": entry},
        )


def export(ctx: RunContext, run: PhaseRun) -> Outcome:
    variant, state = _finite_state(ctx, run, "export")
    path = dist_state.from_rank0(unused_path(ctx.work_dir / f"model-{variant}-step{state.step}.safetensors"))
    own = ctx.task.export_state(state.model) if ctx.task.export_state is not None else None
    tensors = export_weights(state.model, path, own)
    entry = artifact_entry(
        path,
        "inference_weights",
        phase="export",
        variant=variant,
        step=state.step,
        format="safetensors",
        contents="adapter" if own is not None else "state_dict",
    )
    _record_artifact(ctx, entry)
    back = load_weights(path, entry)
    differ = [k for k, v in tensors.items() if k not in back or not finiteness.finite_equal(back[k], v)]
    if differ:
        raise PhaseFailure(
            f"exported tensors differ after reload: {', '.join(differ[:5])}", {"artifact": entry}
        )
    # The replay outputs *before* the save, from the in-memory model: the final phase reloads
    # the file in a fresh process and must get exactly these (R16).
    replays = replay_inputs(ctx.task, state.model, ctx.spec.replay.inputs, ctx.max_length, ctx.device)
    ctx.memo.setdefault("replay_outputs", {})[entry["sha256"]] = replays
    # On disk too: a runner that dies before `final` must not cost the comparison.
    replays_path = dist_state.from_rank0(
        unused_path(ctx.work_dir / f"replays-{variant}-step{state.step}.safetensors")
    )
    save_replays(replays, replays_path)
    replays_entry = artifact_entry(
        replays_path, "replay_outputs", phase="export", variant=variant, step=state.step, of=entry["sha256"]
    )
    _record_artifact(ctx, replays_entry)
    # The config as it would be saved beside these weights: what serving reads from it.
    served = config_warnings(ctx.task, state.model)
    details = {
        "artifact": entry,
        "replay_file": replays_entry,
        "tensors": len(tensors),
        "size_mb": round(entry["size"] / 2**20, 3),
        "replay_outputs": [{"input": c.input, "output": c.output} for c in replays],
        "serving_config": served,
    }
    if served:
        return Outcome(WARN, "; ".join(served), details)
    return Outcome(details=details)
