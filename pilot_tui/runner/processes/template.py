"""The runner's side of the template process (template_server.py): fresh processes without
paying for the imports again.

A fresh process for resume, final or a trainer's variant spent most of its seconds importing
torch (and transformers and TRL for a captured trainer) before running anything of its own: on a
2-core machine ~2 s for torch, 10–20 s with TRL. The template has imported them already; each
request forks it, so a fresh process starts at its own first line. What it shares with the
template, and why that keeps the resume check honest, is in docs/trainer.md ("fresh processes").
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...core.launch import launcher

SERVER = "pilot_tui.runner.processes.template_server"
# Set (to anything) to start every fresh process the plain way.
NO_TEMPLATE_ENV = "PILOT_TUI_NO_TEMPLATE"
# What every fresh process imports: torch and the runner's worker modules.
BASE_PRELOAD = (
    "torch",
    # Building any torch optimizer imports it (Optimizer.__init__ is wrapped to disable dynamo):
    # 1.5 s of a resume process's 1.7 on 2 cores, were it left to the child.
    "torch._dynamo",
    "safetensors.torch",
    "pilot_tui.runner.workers.resume",
    "pilot_tui.runner.workers.reload",
)
# A captured trainer's fresh processes import these too (when installed).
TRAINER_PRELOAD = (
    "transformers",
    "trl",
    "pilot_tui.runner.workers.trainer_resume",
    "pilot_tui.runner.workers.trainer_reload",
    "pilot_tui.runner.workers.trainer_variant",
)


class TemplateChild:
    """A process forked from the template, with the parts of `subprocess.Popen` a fresh process
    needs: `pid`, `poll()`, `returncode`, `kill()` and `communicate(timeout)`. Its stdout and
    stderr are files (read back when it ends)."""

    def __init__(self, pid: int, stdout: Path, stderr: Path) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._stdout, self._stderr = stdout, stderr
        self._ended = threading.Event()

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._ended.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return _text(self._stdout), _text(self._stderr)

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(self.pid, signal.SIGKILL)


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


class Template:
    """One template process for this runner: started once, forked per fresh process."""

    def __init__(self, preload: Sequence[str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.preload = tuple(preload)
        self.started = time.monotonic()
        self._sock = ours
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._started: dict[int, Any] = {}
        self._children: dict[int, TemplateChild] = {}
        self._early_exits: dict[int, int] = {}
        self._next_id = 0
        self.failed: list[str] = []
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            # Plain `python -m`: the socket's descriptor must reach this very process.
            [sys.executable, "-m", SERVER, str(theirs.fileno()), *self.preload],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # a key press's signal to the runner's group is not the template's
        )
        theirs.close()
        threading.Thread(target=self._read, daemon=True, name="template-events").start()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ready(self) -> bool:
        return self._ready.is_set()

    def wait_ready(self, timeout_s: float) -> bool:
        """Until its imports are done (or it died, or `timeout_s` passed): whether it is ready."""
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.05):
            if not self.alive() or time.monotonic() > deadline:
                return False
        return True

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(65536)
            except OSError:
                data = b""
            if not data:  # the template ended: every child still waiting ends with it
                with self._lock:
                    for child in self._children.values():
                        if child.returncode is None:
                            child._exited(-9)
                    for box in self._started.values():
                        box.append(None)
                return
            message = json.loads(data)
            with self._lock:
                if "ready" in message:
                    self.failed = list(message.get("failed", []))
                    self._ready.set()
                elif "started" in message:
                    self._started.setdefault(message["started"], []).append(message["pid"])
                elif "exit" in message:
                    child = self._children.get(message["exit"])
                    if child is not None:
                        child._exited(int(message["code"]))
                    else:  # reported before the caller registered it (a very short child)
                        self._early_exits[message["exit"]] = int(message["code"])

    def start(
        self,
        module: str,
        args: Sequence[str],
        env: Mapping[str, str],
        out_dir: Path,
        cwd: Path | None = None,
        timeout_s: float = 120.0,
    ) -> TemplateChild:
        """Fork a child running `python -m module args`; its stdout/stderr go to files in `out_dir`."""
        stdout, stderr = out_dir / "stdout.log", out_dir / "stderr.log"
        with self._lock:
            self._next_id += 1
            request_id = self._next_id
            self._started[request_id] = []
        out_fd = os.open(stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err_fd = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            request = {
                "id": request_id,
                "module": module,
                "args": list(args),
                "env": dict(env),
                "cwd": str(cwd or Path.cwd()),
            }
            socket.send_fds(self._sock, [json.dumps(request).encode()], [out_fd, err_fd])
        finally:
            os.close(out_fd)
            os.close(err_fd)
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                box = self._started[request_id]
                if box:
                    pid = box[0]
                    del self._started[request_id]
                    if pid is None:
                        raise OSError("the template process ended before it started the fresh process")
                    child = self._children[pid] = TemplateChild(pid, stdout, stderr)
                    if pid in self._early_exits:
                        child._exited(self._early_exits.pop(pid))
                    return child
            if time.monotonic() > deadline or not self.alive():
                raise OSError("the template process did not start the fresh process")
            time.sleep(0.005)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            # shutdown first: it wakes the reader blocked in recv(). A bare close would leave it
            # blocked on a descriptor number the next template's socket may reuse.
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


_TEMPLATE: Template | None = None


def preload_for(trainer: bool) -> tuple[str, ...]:
    return BASE_PRELOAD + (TRAINER_PRELOAD if trainer else ())


def warm(trainer: bool = False) -> Template | None:
    """Start this runner's template now, so its imports overlap the first phases (POSIX only)."""
    global _TEMPLATE
    if not hasattr(socket, "send_fds") or not hasattr(os, "fork") or os.environ.get(NO_TEMPLATE_ENV):
        return None
    if launcher():  # processes start through PILOT_TUI_LAUNCHER (core/launch.py): it decides how
        return None
    wanted = preload_for(trainer)
    if _TEMPLATE is not None and _TEMPLATE.alive() and set(wanted) <= set(_TEMPLATE.preload):
        return _TEMPLATE
    close()
    _TEMPLATE = Template(wanted)
    return _TEMPLATE


def current() -> Template | None:
    """The runner's template if one is running (None: fresh processes start the plain way)."""
    return _TEMPLATE if _TEMPLATE is not None and _TEMPLATE.alive() else None


def close() -> None:
    global _TEMPLATE
    if _TEMPLATE is not None:
        _TEMPLATE.close()
        _TEMPLATE = None
