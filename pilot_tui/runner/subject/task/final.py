"""`final`: reload the exported artifact in a fresh process and replay the replay inputs (R16).

The artifact is the latest `inference_weights` file the export phase recorded; the fresh process
checks it against the sha256 in that record entry before reading it (R17). Its outputs must equal
the ones the export phase computed from the in-memory model before the save: exactly on CPU,
within `resume.tolerance` for the logits on a GPU (the decoded outputs must always be equal).
"""

from __future__ import annotations

from typing import Any

import torch

from ....core.verdict import WARN
from ...context import Outcome, PhaseFailure, PhaseRun, RunContext
from ...loop.replay import ReplayOutput
from ...loop.replay_store import load_replays
from ...loop.serving_check import generation_warnings, reply_ends
from ...memory.probes import release_cache
from ...processes.fresh_process import (
    EXIT_REFUSED,
    FreshProcessFailed,
    context_args,
    read_tensors,
    start_fresh_process,
)
from ...safe_load import UnsafeLoadError


def latest_export(ctx: RunContext) -> dict[str, Any] | None:
    """The artifact entry of the newest export row of this runner that did not fail."""
    for row in reversed(ctx.rows):
        artifact = row.get("details", {}).get("artifact") or {}
        exported = row.get("name") == "export" and row.get("verdict") != "fail"
        if exported and artifact.get("sha256") and artifact.get("kind") == "inference_weights":
            return artifact
    return None


def _replays_from_disk(ctx: RunContext, entry: dict[str, Any]) -> list[ReplayOutput] | None:
    """The export's replay outputs read back from its file (the export ran in an earlier runner)."""
    for row in reversed(ctx.rows):
        details = row.get("details", {})
        # "controls_file": the key of export rows written before the rename.
        stored = details.get("replay_file") or details.get("controls_file") or {}
        if row.get("name") == "export" and stored.get("of") == entry["sha256"]:
            try:
                return load_replays(stored)
            except UnsafeLoadError as exc:
                raise PhaseFailure(
                    f"the outputs before the save were refused: {exc}", {"artifact": entry}
                ) from None
    return None


def _compare_one(before: ReplayOutput, after: dict[str, Any], logits: torch.Tensor | None, tol: float):
    diff = None
    same_logits = True
    if before.logits is not None and logits is not None:
        if before.logits.shape == logits.shape:
            diff = float((before.logits.double() - logits.double()).abs().max()) if logits.numel() else 0.0
            same_logits = torch.equal(before.logits, logits) if tol == 0 else diff <= tol
        else:
            same_logits = False
    elif (before.logits is None) != (logits is None):
        same_logits = False
    same = same_logits and before.output == after["output"] and before.ids == after["ids"]
    same = same and before.error == after["error"]
    row = {
        "input": before.input,
        "before": before.output,
        "after": after["output"],
        "max_abs_logit_diff": diff,
        "same": same,
        "decoding": before.how or None,
        "error": before.error or after["error"] or None,
    }
    return row


def _no_export_reason(ctx: RunContext) -> str:
    """Why there is nothing to reload: never exported, or the export failed (and why)."""
    failed = next((r for r in reversed(ctx.rows) if r.get("name") == "export"), None)
    if failed is not None and failed.get("verdict") == "fail":
        return f"no exported artifact: the export failed — {failed.get('reason', '')}"
    return "no exported artifact in this runner: run the export phase first"


def _refuse_non_finite_replays(before: list[ReplayOutput], entry: dict[str, Any]) -> None:
    """Finiteness first: NaN logits never equal themselves, so a bitwise comparison would blame
    the reload for what the model did before the save."""
    for c in before:
        if c.logits is not None and c.logits.is_floating_point() and not bool(torch.isfinite(c.logits).all()):
            raise PhaseFailure(
                f"the replay output for {c.input!r} was not finite before the save (NaN or inf logits): "
                "the model diverged, so the reload is not compared",
                {"artifact": entry},
            )


def final(ctx: RunContext, run: PhaseRun) -> Outcome:
    entry = latest_export(ctx)
    if entry is None:
        raise PhaseFailure(_no_export_reason(ctx))
    before: list[ReplayOutput] | None = ctx.memo.get("replay_outputs", {}).get(entry["sha256"])
    if before is None:
        before = _replays_from_disk(ctx, entry)
    if before is None:
        raise PhaseFailure(
            "the outputs before the save were not kept (the export ran in an earlier runner): run export again",
            {"artifact": entry},
        )
    _refuse_non_finite_replays(before, entry)
    exact = ctx.device.type == "cpu"
    tol = 0.0 if exact else ctx.spec.resume.tolerance
    # The outputs before the save are on the host already: the fresh process gets the device
    # without the runner's states and cache under it (a model above ~45 % of the card would not
    # fit twice).
    ctx.park_all()
    release_cache(ctx.device)
    out_dir = ctx.work_dir / "final-worker"
    worker = start_fresh_process(
        "pilot_tui.runner.workers.reload",
        [
            *context_args(ctx),
            "--out",
            str(out_dir),
            "--artifact",
            str(entry["path"]),
            "--sha256",
            str(entry["sha256"]),
            "--size",
            str(entry["size"]),
        ],
        out_dir,
    )
    try:
        result, seconds = worker.wait(ctx, said=(run.step.key, 0, 1, "reloading the export in a new process"))
    except FreshProcessFailed as exc:
        what = "refused the artifact" if exc.code == EXIT_REFUSED else f"failed (exit {exc.code})"
        raise PhaseFailure(
            f"the fresh process {what}: {exc}", {"artifact": entry, "worker_stderr": exc.stderr}
        ) from None
    try:
        tensors = read_tensors(result)
    except UnsafeLoadError as exc:
        raise PhaseFailure(f"the fresh process's output was refused: {exc}") from None
    after = result["replays"]
    replays = [
        _compare_one(b, a, tensors.get(f"logits/{i}"), tol)
        for i, (b, a) in enumerate(zip(before, after, strict=True))
    ]
    details: dict[str, Any] = {
        "artifact": entry,
        "sha256_verified": True,
        "tensors_loaded": result["tensors_loaded"],
        "comparison": "bitwise" if exact else f"logits within {tol:g}",
        "replays": replays,
        "fresh_process_s": round(seconds, 3),
        "fresh_process_start": result.get("process_start", ""),
        "serving": result.get("serving", {}),
    }
    bad = next((c for c in replays if not c["same"]), None)
    if bad is not None:
        diff = bad["max_abs_logit_diff"]
        why = f"max |Δlogit| {diff:.3g}" if diff is not None else bad["error"] or "no logits"
        raise PhaseFailure(
            f"replay input {bad['input']!r} differs after reload: {bad['before']!r} before the save "
            f"vs {bad['after']!r} after ({why})",
            details,
        )
    errors = [c for c in replays if c["error"]]
    # Replies that ran on: what the training data teaches a reply to end with, measured, so the
    # row names a cause only where it found one.
    ends = (
        reply_ends(ctx.task, list(ctx.splits["train"]), ctx.max_length)
        if details["serving"].get("unstopped") and ctx.task.stop_ids
        else None
    )
    served = generation_warnings(details["serving"], list(ctx.spec.replay.inputs), ends)
    if served and replays and not errors:
        return Outcome(WARN, "; ".join(served), details)
    if not replays:
        return Outcome(
            WARN,
            "no replay inputs declared ([replay] inputs): the artifact reloads, but no output was compared",
            details,
        )
    if errors:
        return Outcome(
            WARN, f"replay input {errors[0]['input']!r} could not run: {errors[0]['error']}", details
        )
    return Outcome(details=details)
