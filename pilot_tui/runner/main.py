"""Runner process entry: `python -m pilot_tui.runner.main`.

Reads commands (JSON lines) on a private copy of stdin, writes events (JSON lines) on a private
copy of stdout. Anything else the task prints goes to stderr and any read of stdin fails, so user
code can never corrupt or block the protocol.
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from ..core.events import (
    BadInput,
    Cancel,
    Counters,
    Idle,
    OpenCampaign,
    Opening,
    RunnerError,
    RunnerReady,
    RunStep,
    Shutdown,
    WireMessage,
    decode,
)
from ..core.reasons import exception_line
from ..core.spec import SpecError, _line_of, load_spec
from ..core.steps import campaign_steps, find_step
from ..tasks.loader import TaskError, load_task
from .memory import heap
from .processes import forked_call, template
from .processes.determinism import apply_spawn_env
from .processes.lifetime import die_with_parent, exit_now

# The modules that import torch are imported inside the functions that need them: torch must
# load only after `main()` has set the environment cuBLAS reads when its first handle is made.

COUNTER_PERIOD_S = 0.5
# Exit status of a runner that ended itself after a sticky CUDA error (runner/memory/cuda_fault.py).
EXIT_POISONED = 4


class Channel:
    """The event pipe; writes from the phase thread and the counters thread never interleave."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def emit(self, message: WireMessage) -> None:
        line = message.to_json() + "\n"
        with self.lock:
            self.stream.write(line)
            self.stream.flush()


def _private_stdout() -> TextIO:
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)  # user prints now land on stderr
    sys.stdout = sys.stderr
    return proto


def route(msg: WireMessage, commands: queue.Queue, cancel: threading.Event) -> None:
    """A command from the view: a cancel is acted on at the phase's next safe point (it must not
    wait behind the running step in the queue); everything else is queued in order."""
    if isinstance(msg, Cancel):
        cancel.set()
    else:
        commands.put(msg)


class NoStdin(io.TextIOBase):
    """The stdin user code sees: any read fails the phase with a reason that says why (R24).

    The command pipe is private to the protocol: a leftover `breakpoint()` or `input()` would
    otherwise block on it forever (pdb's prompt in a stderr tail nobody reads).
    """

    MESSAGE = (
        "task code read from stdin (input() or breakpoint()?): the runner has no terminal; "
        "remove the call, or debug the task outside pilot-tui"
    )

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> str:
        raise StdinUnavailable(self.MESSAGE)

    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]
        raise StdinUnavailable(self.MESSAGE)

    def isatty(self) -> bool:
        return False


class StdinUnavailable(OSError):
    """Raised by `NoStdin`: user code tried to read the runner's stdin."""


def _private_stdin() -> TextIO:
    """The command pipe on a private fd; fd 0 becomes /dev/null, `sys.stdin` a `NoStdin`."""
    commands = os.fdopen(os.dup(0), "r", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # child processes and C code reading fd 0 see an empty stdin
    os.close(devnull)
    sys.stdin = NoStdin()
    return commands


def _ignore_terminal_signals() -> None:
    """The view alone decides what a Ctrl-C or a hang-up means (cancel, then save).

    The runner shares the view's process group and terminal, so both would get SIGINT/SIGHUP;
    left to the default the runner would die mid-phase and its row would be lost.
    """
    for sig in (signal.SIGINT, signal.SIGHUP):
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_IGN)


def _read_commands(commands: queue.Queue, cancel: threading.Event, stream: TextIO) -> None:
    for line in stream:
        if not line.strip():
            continue
        try:
            msg = decode(line)
        except Exception as exc:  # a malformed command must not kill the reader
            commands.put(RunnerError(message=f"bad command: {exc}"))
            continue
        route(msg, commands, cancel)
    commands.put(Shutdown())  # stdin closed: the parent is gone


def _counters(channel: Channel, ctx_holder: dict, stop: threading.Event) -> None:
    # After main() set the spawn environment: torch loads only then.
    from .memory.probes import live_counters

    while not stop.wait(COUNTER_PERIOD_S):
        ctx = ctx_holder.get("ctx")
        if ctx is None or not ctx_holder.get("busy"):
            continue
        try:
            values = live_counters(ctx.device)
        except Exception:
            continue
        channel.emit(Counters(time=time.time(), device=str(ctx.device), values=values))


def leave_a_core_for_the_view() -> int:
    """Use every core but one for torch's CPU threads, unless the user chose (OMP_NUM_THREADS).

    torch's OpenMP threads spin while they wait: with one per core they starve the dashboard
    (key latency) and collapse under any other load. Measured on the 2-core demo: 1 thread runs
    a step as fast as 2 spinning ones (17.4 vs 16.5 ms) and 2.3× faster than 2 passive ones.
    """
    import torch  # only after main() set the spawn environment

    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, min(torch.get_num_threads(), (os.cpu_count() or 1) - 1)))
    return torch.get_num_threads()


class OpenStages:
    """The events of a campaign's open, passed on, with the moment each stage (`Opening`) began:
    the record keeps each stage's seconds (`[environment] open_s`), so where the wait before the
    first verdict went can be read afterwards, not only watched."""

    def __init__(self, emit: Callable[[WireMessage], None]) -> None:
        self.emit = emit
        self.began: list[tuple[str, float]] = []

    def __call__(self, message: WireMessage) -> None:
        if isinstance(message, Opening):
            self.began.append((message.stage, time.perf_counter()))
        self.emit(message)

    def seconds(self) -> dict[str, float]:
        """Each stage's seconds, up to now for the last one."""
        ends = [t for _, t in self.began[1:]] + [time.perf_counter()]
        return {stage: round(end - t, 3) for (stage, t), end in zip(self.began, ends, strict=True)}


def open_campaign(
    cmd: OpenCampaign, emit: Callable[[WireMessage], None], cancel: threading.Event, keep_heap: bool = False
):
    """Load spec and task; report BadInput for anything the user must fix. `keep_heap`: freeze
    what the open built before saying it is ready (`serve`)."""
    emit = OpenStages(emit)
    emit(Opening(stage="importing torch"))
    # After main() set the spawn environment: torch loads only then.
    from .context import RunContext, pick_device
    from .processes.fresh_process import task_file_sha256

    try:
        loaded = load_spec(cmd.spec_path)
        # The fresh processes' imports, paid now in a process of their own while the task (or
        # the script's capture) is built here: processes/template.py.
        template.warm(trainer=loaded.spec.task.captures_trainer)
        # Hashed before the import: fresh worker processes refuse a task file edited since.
        task_sha = task_file_sha256(loaded)
        if loaded.spec.task.captures_trainer:
            ctx = _open_trainer(loaded, emit, cmd, cancel, keep_heap)
            return _ready(ctx, ctx.task, emit, keep_heap)
        t = loaded.spec.task
        emit(Opening(stage=f"building the task {t.file or t.builtin} (its examples)"))
        if keep_heap:
            heap.freeze_imports()
        task = load_task(loaded)
        device = _campaign_key(loaded, "batch.device", pick_device, loaded.spec.batch.device)
        loaded = _resolve_world(loaded, device)
        key = "split.field" if loaded.spec.split.field else "split"
        ctx = _campaign_key(loaded, key, RunContext, loaded, task, device, emit, Path(cmd.work_dir), cancel)
        ctx.memo["task_sha256"] = task_sha
        # A runner taking over a campaign (a restart, `continue`) gets the rows recorded so far.
        ctx.rows.extend(cmd.rows)
        if not ctx.splits["train"]:
            raise TaskError(f"{loaded.path}: the train split is empty ({len(task.examples)} examples)")
        if not ctx.splits["validation"]:
            raise TaskError(f"{loaded.path}: the validation split is empty ({len(task.examples)} examples)")
        accounting = ctx.accounting()
        if accounting["updates_per_epoch"] == 0:
            b = loaded.spec.batch
            raise TaskError(
                f"{loaded.path}: batch: the train split has {len(ctx.splits['train'])} examples, fewer than "
                f"one update of {b.microbatch} × {b.accumulation} × {b.replicas} = "
                f"{accounting['effective_batch']} (lower batch.microbatch or batch.accumulation, "
                f"or set batch.drop_last = false)"
            )
    except (SpecError, TaskError, ValueError) as exc:
        emit(BadInput(message=str(exc)))
        return None
    except Exception as exc:
        # Anything the user's task raises while it is built (examples that are ints, None, a
        # generator…) is bad input too: one line naming the file, never a view left waiting.
        emit(BadInput(message=f"{cmd.spec_path}: the task could not be built: {exception_line(exc)}"))
        return None
    return _ready(ctx, task, emit, keep_heap)


def _open_trainer(loaded, emit, cmd: OpenCampaign, cancel: threading.Event, keep_heap: bool):
    """A `trainer_script` campaign: the script captured in this process (docs/trainer.md)."""
    emit(Opening(stage="importing transformers"))
    # After main() set the spawn environment: torch loads only then.
    from .subject.trainer.campaign import open_trainer_campaign

    if keep_heap:
        heap.freeze_imports()

    ctx = open_trainer_campaign(loaded, emit, Path(cmd.work_dir), cancel)
    ctx.rows.extend(cmd.rows)
    return ctx


def _ready(ctx, task, emit: OpenStages, keep_heap: bool):
    """Tell the view the campaign is open: the dataset, its accounting and the environment."""
    # After main() set the spawn environment: torch loads only then.
    from .environment import describe

    accounting = ctx.accounting()
    device = ctx.device
    dataset = {
        "task": task.name,
        "kind": task.kind,
        "examples": len(task.examples),
        "group_key": ctx.group_key,
        "splits": {k: len(v) for k, v in ctx.splits.items()},
        "max_length": ctx.max_length,
    }
    emit(Opening(stage="importing torch._dynamo (building an optimizer imports it)"))
    _warm_lazy_imports()
    leave_a_core_for_the_view()
    if keep_heap:
        emit(Opening(stage="collecting the open's garbage, freezing the rest"))
        heap.keep_opened()
    env = describe(device)
    env["open_s"] = emit.seconds()
    emit(RunnerReady(pid=os.getpid(), environment=env, dataset=dataset | {"accounting": accounting}))
    return ctx


def _campaign_key(loaded, key: str, fn, *args):
    """`fn(*args)`, a ValueError from it told as bad input naming the campaign file and `key`."""
    try:
        return fn(*args)
    except ValueError as exc:
        line = _line_of(loaded.text, key)
        where = f"line {line}: " if line else ""
        raise TaskError(f"{loaded.path}: {where}{key}: {exc}") from None


def _warm_lazy_imports() -> None:
    """Import what torch otherwise imports lazily inside the first phase.

    Building the first optimizer imports torch._dynamo (about a second on CPU): done here, once,
    so the `load` row measures loading the weights, not a library's import.
    """
    # Optional: a torch without it still runs every phase.
    with contextlib.suppress(Exception):
        import torch._dynamo  # noqa: F401


def _resolve_world(loaded, device):
    # After main() set the spawn environment: torch loads only then.
    from .distributed.launcher import resolve_world

    return resolve_world(loaded, device)


def _run(ctx, step, overrides) -> None:
    """A step on the ranks of a torchrun group when the campaign is distributed, else here."""
    # After main() set the spawn environment: torch loads only then.
    from .distributed.launcher import execute_on_ranks, runs_on_ranks
    from .phases import execute

    if runs_on_ranks(ctx, step):
        execute_on_ranks(ctx, step, overrides)
    else:
        execute(ctx, step, overrides)


def _close_ranks(ctx) -> None:
    if ctx is not None:
        # After main() set the spawn environment: torch loads only then.
        from .distributed.launcher import close_group

        close_group(ctx)


def serve(
    commands: queue.Queue,
    emit: Callable[[WireMessage], None],
    cancel: threading.Event,
    holder: dict,
    keep_heap: bool = False,
) -> bool:
    """The runner's command loop: open the campaign, run steps, until Shutdown.

    `holder` shares the open context and whether a step runs with the counters thread.
    `keep_heap`: freeze what each open built out of the collector's walks (memory/heap.py); the
    runner process does, a runner on a test's thread only when the test asks. Returns True when
    it ended because a step poisoned the CUDA context (the process must end too).
    """
    try:
        return _serve(commands, emit, cancel, holder, keep_heap)
    finally:
        template.close()  # the template's children have all been waited for by their phases
        forked_call.close_all()  # work started beside a step that no step will read now


def _serve(
    commands: queue.Queue,
    emit: Callable[[WireMessage], None],
    cancel: threading.Event,
    holder: dict,
    keep_heap: bool,
) -> bool:
    ctx = None
    while True:
        cmd = commands.get()
        if isinstance(cmd, Shutdown):
            break
        try:
            if isinstance(cmd, RunnerError):
                emit(cmd)
            elif isinstance(cmd, OpenCampaign):
                _close_ranks(ctx)
                if keep_heap and ctx is not None:
                    ctx = holder["ctx"] = None  # the previous campaign's heap: collected first
                    heap.hand_back()
                ctx = holder["ctx"] = open_campaign(cmd, emit, cancel, keep_heap)
            elif isinstance(cmd, RunStep):
                if ctx is None:
                    emit(RunnerError(message="no campaign is open"))
                else:
                    step = find_step(campaign_steps(ctx.spec), cmd.step)
                    holder["busy"] = True
                    try:
                        _run(ctx, step, cmd.overrides)
                    finally:
                        holder["busy"] = False
                    if _poisoned(ctx):
                        emit(Idle())  # the step's fail row is out; no other step runs here
                        return True
            else:
                emit(RunnerError(message=f"unexpected command {cmd.kind!r}"))
        except Exception as exc:
            emit(RunnerError(message=exception_line(exc), traceback=traceback.format_exc()))
        emit(Idle())
    _close_ranks(ctx)
    return False


def _poisoned(ctx) -> bool:
    # After main() set the spawn environment: torch loads only then.
    from .phases.base import POISONED_KEY

    return bool(ctx.memo.get(POISONED_KEY))


def _end_poisoned() -> None:
    """Leave now: no CUDA call can succeed in this process any more, not even its clean-up.

    The step's fail row is already sent; the session sees the pipe close and starts a new
    runner for the next step. `os._exit` skips the interpreter's teardown, whose CUDA frees
    would raise (or hang) on the poisoned context.
    """
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(EXIT_POISONED)


def main() -> int:
    die_with_parent()
    apply_spawn_env(os.environ)  # before torch: cuBLAS reads it when its first handle is made
    _ignore_terminal_signals()
    channel = Channel(_private_stdout())
    pipe = _private_stdin()
    commands: queue.Queue = queue.Queue()
    cancel = threading.Event()
    threading.Thread(
        target=_read_commands, args=(commands, cancel, pipe), daemon=True, name="commands"
    ).start()
    holder: dict = {}
    stop = threading.Event()
    threading.Thread(target=_counters, args=(channel, holder, stop), daemon=True, name="counters").start()
    try:
        poisoned = serve(commands, channel.emit, cancel, holder, keep_heap=True)
    finally:
        stop.set()
    if poisoned:
        _end_poisoned()
    exit_now(0)


if __name__ == "__main__":
    raise SystemExit(main())
