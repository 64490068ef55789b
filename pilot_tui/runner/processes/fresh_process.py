"""Fresh processes for the resume and final checks (R15, R16), both sides of the pipe.

The runner starts one with `python -m pilot_tui.runner.workers.resume ...` (or `workers.reload`);
it loads the spec and the task itself (nothing is inherited but the command line), writes its results into
an output folder (JSON + safetensors, never a pickle) and exits. Exit code 3 means a load was
refused (hash, provenance or unsafe content), 2 bad input, 1 anything else.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from safetensors.torch import save_file

from ...core.atomic import write_atomic, write_text_atomic
from ...core.events import PhaseProgress
from ...core.hashing import sha256_file
from ...core.launch import module_command, torchrun_script
from ...core.reasons import exception_line, first_line
from ...core.spec import SpecError, load_spec
from ...tasks.loader import TaskError, load_task
from ..context import SAY_AFTER_S, RunContext, pick_device
from ..distributed import state as dist_state
from ..loop.checkpoint import detached_copies
from ..safe_load import UnsafeLoadError, load_tensors
from . import template
from .determinism import apply_spawn_env
from .lifetime import die_with_parent, exit_without_collecting
from .template import TemplateChild

EXIT_REFUSED, EXIT_BAD_INPUT, EXIT_ERROR = 3, 2, 1
RESULT_FILE = "result.json"
START_WORDS = {
    "template": "forked from the template process (torch and the libraries already imported)",
    "exec": "started as python -m (imports paid in the process)",
}


class FreshProcessFailed(Exception):
    """The fresh process ended without a result; the message is its last error line."""

    def __init__(self, message: str, code: int, stderr: list[str]) -> None:
        super().__init__(message)
        self.code = code
        self.stderr = stderr


# (the step, done, total, what the new process does): a wait's progress line.
Said = tuple[str, int, int, str]
# A waiting step's line is redrawn this often, its seconds counted.
SAID_PERIOD_S = 1.0


@dataclass
class FreshProcess:
    """A started worker process; `wait()` returns its result and the seconds it took."""

    proc: subprocess.Popen[str] | TemplateChild
    out_dir: Path
    started: float
    # "template": forked from the runner's template process (its imports already paid); "exec".
    how: str = "exec"

    def wait(
        self, ctx: RunContext | None = None, timeout_s: float = 600.0, said: Said | None = None
    ) -> tuple[dict[str, Any], float]:
        """The worker's result; `said` (step, done, total, what it does) is shown while it runs,
        the seconds counted, so no wait for a new process is a silent one."""
        stderr = ""
        deadline = self.started + timeout_s
        next_said = self.started
        try:
            while True:
                try:
                    _, stderr = self.proc.communicate(timeout=0.05)
                    break
                except subprocess.TimeoutExpired:
                    if ctx is not None:
                        ctx.check_cancel()  # raises Cancelled; `finally` kills the worker
                        ctx.heartbeat()
                        now = time.monotonic()
                        if said is not None and now >= next_said:
                            step, done, total, what = said
                            ctx.progress(step, done, total, message=f"{what} ({now - self.started:.0f} s)")
                            next_said = now + SAID_PERIOD_S
                    if time.monotonic() > deadline:
                        raise FreshProcessFailed(
                            f"the fresh process took over {timeout_s:g} s", -1, []
                        ) from None
        finally:
            self.kill()
        seconds = time.monotonic() - self.started
        lines = [ln for ln in (stderr or "").splitlines() if ln.strip()]
        if self.proc.returncode != 0:
            last = next((ln for ln in reversed(lines) if ln.startswith("pilot-tui worker:")), "")
            last = last.removeprefix("pilot-tui worker:").strip() or (lines[-1] if lines else "no message")
            raise FreshProcessFailed(last, self.proc.returncode, lines[-10:])
        result_path = self.out_dir / RESULT_FILE
        if not result_path.is_file():
            raise FreshProcessFailed(f"the fresh process wrote no {RESULT_FILE}", 0, lines[-10:])
        result = json.loads(result_path.read_text())
        # How it started, for its row: forked from the template (imports paid) or `python -m`.
        result["process_start"] = START_WORDS[self.how]
        return result, seconds

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


# How often a step waiting for a process started ahead looks again.
AHEAD_POLL_S = 0.02


def wait_before_step(
    ctx: RunContext, step_key: str, ended: Callable[[], bool], what: str, limit_s: float
) -> bool:
    """Before a step, wait for what a process started ahead still does (`ended()`): said on the
    step's line after SAY_AFTER_S, given up on a cancel or after `limit_s`. True when it ended;
    False otherwise, and the caller stops the process (its own step starts another)."""
    t0 = time.monotonic()
    while not ended():
        waited = time.monotonic() - t0
        if ctx.cancel.is_set() or waited > limit_s:
            return False
        if waited >= SAY_AFTER_S:
            message = f"waiting for {what} before this step ({waited:.0f} s)"
            ctx.emit(PhaseProgress(step=step_key, done=0, total=1, message=message))
        time.sleep(AHEAD_POLL_S)
    return True


# What torchrun tells its ranks: a fresh process started *from* a rank must not inherit it, or it
# would try to join the rank's group (or torchrun would reuse the rank's run).
TORCHRUN_ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
)


def without_torchrun_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in TORCHRUN_ENV and not k.startswith("TORCHELASTIC_")}


def start_fresh_process(module: str, args: Sequence[str], out_dir: Path, nproc: int = 1) -> FreshProcess:
    """Start `python -m module args...`; its stdout and stderr are captured, never inherited
    (the runner's stdout is the event protocol). With `nproc` > 1 it is a new torchrun process
    group of that many ranks (a resume under DDP/FSDP is verified in a *new* group, R22)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / RESULT_FILE).unlink(missing_ok=True)
    # Reproducible cuBLAS in the worker as in the runner: fixed before the worker loads torch.
    env = apply_spawn_env(dict(without_torchrun_env(os.environ), PYTHONUNBUFFERED="1"))
    command = module_command(module, args)
    if nproc > 1:
        torchrun = ["--standalone", "--nproc_per_node", str(nproc), "--max-restarts", "0"]
        torchrun += ["--monitor-interval", "0.2", *torchrun_script(module), *args]
        command = module_command("torch.distributed.run", torchrun)
    tmpl = template.current()
    if nproc == 1 and tmpl is not None:
        # The same command, forked from the template that already imported torch (template.py).
        try:
            child = tmpl.start(module, args, env, out_dir)
            return FreshProcess(child, out_dir, time.monotonic(), how="template")
        except OSError:  # the template died: the plain way, as without one
            pass
    proc = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    return FreshProcess(proc, out_dir, time.monotonic())


def task_file_sha256(loaded) -> str:
    """The sha256 of the campaign's task file ("" for a built-in task)."""
    return sha256_file(loaded.resolve(loaded.spec.task.file)) if loaded.spec.task.file else ""


def context_args(ctx: RunContext) -> list[str]:
    """What a worker needs to rebuild the campaign: the spec and task file hashes, the threads."""
    # The hash taken when the runner imported the task; computed now only for a context made
    # without the runner's open (an in-process test).
    task_sha = ctx.memo.get("task_sha256")
    if task_sha is None:
        task_sha = task_file_sha256(ctx.loaded)
    return [
        "--spec",
        str(ctx.loaded.path),
        "--spec-sha256",
        ctx.loaded.sha256,
        "--task-sha256",
        task_sha,
        "--threads",
        str(torch.get_num_threads()),
    ]


# ------------------------------------------------------------------------- worker side


def fresh_process_parser(module: str, flag: str, what: str) -> argparse.ArgumentParser:
    """What every fresh process takes: the runner's context (spec and task hashes, threads, the
    output folder), and the one file it loads with the provenance the record holds for it
    (R17: path + hash + size)."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}")
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--spec-sha256", required=True)
    parser.add_argument("--task-sha256", default="")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(flag, type=Path, required=True)
    parser.add_argument("--sha256", required=True, help=f"the {what}'s recorded sha256")
    parser.add_argument("--size", type=int, default=None, help=f"the {what}'s recorded size in bytes")
    return parser


def fresh_process_context(args) -> RunContext:
    """Load the spec and the task from scratch, as the runner did; refuse a changed spec."""
    die_with_parent()  # never outlive the runner
    if args.threads:
        # Same thread count as the runner: CPU reductions split by thread, and bitwise equality
        # of the losses needs the same split.
        torch.set_num_threads(args.threads)
    loaded = load_spec(args.spec)
    if loaded.sha256 != args.spec_sha256:
        raise ValueError(f"{args.spec}: the campaign file changed since the runner read it")
    check_task_file(loaded, args.task_sha256)
    task = load_task(loaded)
    device = pick_device(loaded.spec.batch.device)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # started by torchrun: join the new group
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(device)
        backend = loaded.spec.distributed.backend or ("nccl" if device.type == "cuda" else "gloo")
        dist.init_process_group(backend, timeout=dt.timedelta(seconds=loaded.spec.distributed.timeout_s))
    return RunContext(loaded, task, device, lambda _msg: None, args.out)


def check_task_file(loaded, expected: str) -> None:
    """Refuse a task file edited since the runner imported it: the fresh process would run other
    code, and the check would blame the resume (e.g. "batch ids differ") for the edit."""
    if not loaded.spec.task.file:
        return
    now = task_file_sha256(loaded)
    if now != expected:
        raise ValueError(
            f"{loaded.resolve(loaded.spec.task.file)}: the task file changed since the runner imported it "
            f"(sha256 {expected[:12] or '?'}… then, {now[:12]}… now); rerun the campaign"
        )


def write_result(out_dir: Path, result: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]) -> None:
    """Tensors to safetensors, everything else to JSON naming the tensors file and its sha256."""
    if not dist_state.is_rank0():  # one result per process group
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    tensor_path = out_dir / "tensors.safetensors"
    plain = detached_copies(tensors)  # tied weights share memory: safetensors needs copies
    write_atomic(tensor_path, lambda tmp: save_file(plain, tmp))
    body = dict(result) | {
        "tensors": {
            "path": str(tensor_path),
            "size": tensor_path.stat().st_size,
            "sha256": sha256_file(tensor_path),
        }
    }
    text = json.dumps(body)
    write_text_atomic(out_dir / RESULT_FILE, text)


def read_tensors(result: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The worker's tensors, checked against the hash the worker reported (R17)."""
    entry = result["tensors"]
    return load_tensors(entry["path"], entry)


def run_fresh_process(body) -> int:
    """Run a worker body; every failure becomes one `pilot-tui worker:` line and an exit code.

    Not `lifetime.exit_now`: a child forked from the template already ends with `os._exit`
    (template_server.py), and must not run the atexit handlers it inherited from the template."""
    try:
        return _run_body(body)
    finally:
        exit_without_collecting()


def _run_body(body) -> int:
    try:
        body()
    except UnsafeLoadError as exc:
        print(f"pilot-tui worker: {first_line(str(exc))}", file=sys.stderr)
        return EXIT_REFUSED
    except (SpecError, TaskError, ValueError) as exc:
        print(f"pilot-tui worker: {first_line(str(exc)) or exception_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:
        traceback.print_exc()
        print(f"pilot-tui worker: {exception_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    return 0
