"""`machine`: the rented machine itself, before anything long runs on it (R30).

The host's cores against the loader's workers, `/dev/shm` against what the workers hold there,
and every place the run writes (checkpoints, the Hugging Face caches, the temporary folder):
free space against what the run writes, and a timed write. On a GPU box, each GPU's GEMM and
memory bandwidth against its datasheet and its peers, copies between every pair, and an
all-reduce against the link NVML reports; on a CPU, its GEMM and memory bandwidth as figures.
"""

from __future__ import annotations

import json
import subprocess

from ...core.launch import module_command
from ...core.reasons import first_line, message_line
from ...core.verdict import Verdict
from ..context import RunContext
from ..machine.batch import largest_batch_bytes
from ..machine.campaign import request_for
from ..machine.check import run_check
from .base import Outcome, PhaseFailure, PhaseRun, phase

# Every GPU measured, pairs copied, one all-reduce: minutes at most on an 8-GPU box.
GPU_CHECK_TIMEOUT_S = 600.0


@phase("machine")
def machine(ctx: RunContext, run: PhaseRun) -> Outcome:
    batch_bytes, unknown = None, ""
    try:
        batch_bytes, _ = largest_batch_bytes(
            ctx.task, ctx.splits["train"], ctx.config().microbatch, ctx.max_length
        )
    except Exception as exc:  # a task whose rows do not collate here: the rest still runs
        unknown = f"the batch did not collate: {message_line(exc)}"
    request = request_for(ctx.loaded, ctx.work_dir.parent, ctx.rows, batch_bytes, unknown)
    if ctx.device.type != "cuda":
        with ctx.saying("timing a write to each place the run writes, then the CPU's GEMM and memory"):
            result = run_check(request)
        return Outcome(Verdict(result.verdict), result.reason, result.details)
    # Measuring every GPU makes a CUDA context on each: in a process of its own, not the runner's.
    with ctx.saying("measuring every GPU in a process of its own (GEMM, memory, pair copies, all-reduce)"):
        proc = subprocess.run(
            module_command("pilot_tui.runner.machine", [json.dumps({"request": request.as_json()})]),
            capture_output=True,
            text=True,
            timeout=GPU_CHECK_TIMEOUT_S,
            check=False,
        )
    if proc.returncode != 0:
        raise PhaseFailure(
            f"the machine check's process ended with code {proc.returncode}: {first_line(proc.stderr[-300:])}"
        )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return Outcome(Verdict(out["verdict"]), out["reason"], out["details"])
