"""The template process: the heavy libraries imported once, then a fork per fresh process.

Started (a new interpreter, never a fork of the runner) with one end of a socket pair. It
imports the modules it is told to — torch, the worker modules, transformers and TRL for a
captured trainer — and nothing else: no campaign, no task, no script, no tensor, no CUDA. Each
request is a module to run as `__main__` with its arguments, environment, folder and two open
files for its stdout and stderr; the template forks, the child runs the module as
`python -m module args` would, and the template reports its pid, then its exit code.

A child shares with the template only what the imports made. The runner's state (its training
state, its RNG, whatever a run planted in memory) is in another process the template was never
forked from; and each child starts from the template, never from an earlier child.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import runpy
import select
import signal
import socket
import sys
import traceback
from typing import Any

from .lifetime import die_with_parent

REQUEST_BYTES = 1 << 20
POLL_S = 0.05


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.send(json.dumps(message).encode())


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code  # killed by a signal: as a shell reports it


def _run_child(request: dict[str, Any], fds: list[int], sock: socket.socket) -> None:
    """In the forked child: become `python -m module args` in the requested folder and
    environment, then exit with the module's code. Never returns."""
    code = 1
    try:
        sock.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in (null, *fds):
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # A fresh interpreter seeds torch's and numpy's global generators from the OS; a fork
        # would share the template's (Python's `random` reseeds itself after a fork).
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.seed()
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy.random.seed()
        # sys.path as `python -m` makes it in that folder with that PYTHONPATH: the folder first.
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [request["cwd"], *extra, *(p for p in sys.path[1:] if p not in extra)]
        sys.argv = [request["module"], *request["args"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed stream: nothing more to say
                stream.flush()
        os._exit(code)


def _reap(sock: socket.socket, children: set[int]) -> None:
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.discard(pid)
            _send(sock, {"exit": pid, "code": _exit_code(status)})


def serve(sock: socket.socket) -> None:
    """Fork one child per request until the runner closes its end; report starts and exits."""
    children: set[int] = set()
    while True:
        _reap(sock, children)
        ready, _, _ = select.select([sock], [], [], POLL_S)
        if not ready:
            continue
        data, fds, _, _ = socket.recv_fds(sock, REQUEST_BYTES, 2)
        if not data:  # the runner is gone: its children are the kernel's (they die with us)
            return
        request = json.loads(data)
        pid = os.fork()
        if pid == 0:
            _run_child(request, fds, sock)
        for fd in fds:
            os.close(fd)
        children.add(pid)
        _send(sock, {"started": request["id"], "pid": pid})


def main() -> int:
    fd, modules = int(sys.argv[1]), sys.argv[2:]
    die_with_parent()
    sock = socket.socket(fileno=fd)
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # a library not installed: its fresh processes import it themselves
            failed.append(f"{name}: {type(exc).__name__}")
    # Every child inherits the imports: frozen, its full collections never walk them again (with
    # transformers and TRL ~0.2 s each; a captured trainer's train() runs one) and its pages are
    # not written to by the collector (runner/memory/heap.py: freeze_imports).
    gc.freeze()
    _send(sock, {"ready": sorted(set(modules) - {f.split(":")[0] for f in failed}), "failed": failed})
    serve(sock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
