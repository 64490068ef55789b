"""`final`'s new process: the export reloaded from its folder alone, the row and prompts the
runner recorded before the save replayed through it (`engine_gates.final` compares).

On a CPU runner with a core its torch threads leave idle, the process starts ahead, beside the
LR board's first run (never timed), once the export exists: what it reloads is the folder on
disk and the inputs `export` recorded, which no later step changes. Any step other than an LR
run or `final` waits for it to end first, so timed steps still run alone; `final` then takes its
result. One started for another export, or one that failed, is stopped and `final` starts its own,
so a failure is `final`'s own. Not beside a process C still running the script (`resume_gate`):
one spare core.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import torch
from safetensors.torch import save_file

from ....core.hashing import sha256_file
from ....core.launch import launcher
from ....core.steps import Step
from ...context import RunContext
from ...processes import template
from ...processes.forked_call import core_to_spare
from ...processes.fresh_process import FreshProcess, start_fresh_process, wait_before_step
from .captured import EXPORT_MEMO, adapter_of
from .resume_gate import capture_running

AHEAD_KEY = "trainer.final_ahead"


@dataclass
class ReloadAhead:
    """The reload's new process started before its step, and for which export."""

    worker: FreshProcess
    export: str
    beside: list[str] = field(default_factory=list)


def start_reload(ctx: RunContext, exported: dict[str, Any]) -> FreshProcess:
    """The new process that reloads the export from its folder and replays the row and prompts
    the runner recorded before the save (`export`)."""
    work = ctx.work_dir / "trainer-final"
    work.mkdir(parents=True, exist_ok=True)
    row_file = work / "row.safetensors"
    save_file({k: v.contiguous() for k, v in exported["batch"].items()}, str(row_file))
    stops = sorted(adapter_of(ctx).ends)
    # The new process reads the row only through safe_load, against the hash written here.
    row = {"path": str(row_file), "sha256": sha256_file(row_file), "size": row_file.stat().st_size}
    request = {"batch": row, "prompts": exported["prompts"], "stops": stops}
    (work / "inputs.json").write_text(json.dumps(request))
    flags = ["--adapter-only"] if exported["adapter_only"] else []
    return start_fresh_process(
        "pilot_tui.runner.workers.trainer_reload",
        [
            "--export", str(exported["path"]),
            *flags,
            "--model-class", exported["model_class"],
            "--inputs", str(work / "inputs.json"),
            "--threads", str(torch.get_num_threads()),
            "--out", str(work / "out"),
        ],
        work / "out",
    )  # fmt: skip


def start_ahead(ctx: RunContext, step: Step) -> None:
    """The reload started now, beside an LR run, where it gains: a CPU runner leaving a core idle,
    a new process that starts cheaply, the export made, `final` still to run."""
    found: ReloadAhead | None = ctx.memo.get(AHEAD_KEY)
    if found is not None:
        if found.worker.proc.poll() is None:
            found.beside.append(step.key)
        return
    exported = ctx.memo.get(EXPORT_MEMO)
    tmpl = template.current()
    cheap = (tmpl is not None and tmpl.ready()) or bool(launcher())
    if (
        exported is None
        or "final" in ctx.spec.phases.skip
        or any(r.get("name") == "final" for r in ctx.rows)
        or ctx.device.type != "cpu"
        or ctx.spec.distributed.strategy != "none"
        or not core_to_spare()
        or not cheap
        or capture_running(ctx)
    ):
        return
    ctx.memo[AHEAD_KEY] = ReloadAhead(start_reload(ctx, exported), str(exported["path"]), [step.key])


def settle_ahead(ctx: RunContext, step: Step) -> None:
    """Before a step that is neither an LR run nor `final`: the reload started ahead ends first."""
    found: ReloadAhead | None = ctx.memo.get(AHEAD_KEY)
    if found is None:
        return
    limit = ctx.spec.limit_for("final").time_s or 600.0  # as final's own wait for it

    def ended() -> bool:
        return found.worker.proc.poll() is not None

    if not wait_before_step(ctx, step.key, ended, "the final check's new process to end", limit):
        found.worker.kill()  # `final` starts its own when it runs
        ctx.memo.pop(AHEAD_KEY, None)


def taken_ahead(ctx: RunContext, export: str) -> ReloadAhead | None:
    """The reload started ahead for this export and not failed, else None (one started for another
    export, or one that failed, is stopped: `final` starts its own)."""
    found: ReloadAhead | None = ctx.memo.pop(AHEAD_KEY, None)
    if found is None:
        return None
    if found.export != export or found.worker.proc.poll() not in (None, 0):
        found.worker.kill()
        return None
    return found
