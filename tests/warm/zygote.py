"""A warm process: it imports torch once, then forks a child per request from launch.py.

`python zygote.py WARM_DIR KEY`, started by the first launcher that asks for KEY's environment.
It listens on WARM_DIR/KEY.sock. A request brings the module, its arguments, the environment,
the working directory and the launcher's stdin, stdout and stderr; the child becomes
`python -m module args` on them: own session, that environment and directory, stdio rebuilt
as Python builds it for that environment, the random generators reseeded from the OS as a new
interpreter's are (torch seeds its own at import, numpy its global one). What it shares with
its siblings is what was imported here and the string hash seed.

One thread only (a fork from a process with threads can inherit a held lock): a selector waits
on the socket, each child's pidfd (its exit) and each launcher's connection (a forwarded signal,
or the launcher's death, which kills the child). It exits when the process that owns the test
session (TESTS_WARM_OWNER) does; its children die with it.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import threading
import traceback
from typing import Any

from launch import die_with_parent, env_key, key_items  # beside this file: sys.path[0]

PRELOAD_ENV = "TESTS_WARM_PRELOAD"
OWNER_ENV = "TESTS_WARM_OWNER"
PRELOAD = "torch,torch._dynamo"


def log(msg: str) -> None:
    print(f"zygote {os.getpid()}: {msg}", file=sys.stderr, flush=True)


def rebuild_stdio(env: dict[str, str]) -> None:
    """sys.stdin/stdout/stderr over fds 0-2 as Python makes them at start-up for `env`."""
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))

    def stream(fd: int, name: str, errors: str) -> io.TextIOWrapper:
        write = fd > 0
        raw = io.FileIO(fd, "wb" if write else "rb", closefd=False)
        with_buffer = not (write and unbuffered)
        buffer: Any = raw
        if with_buffer:
            buffer = io.BufferedWriter(raw) if write else io.BufferedReader(raw)
        line = write and with_buffer and (raw.isatty() or fd == 2)
        text = io.TextIOWrapper(
            buffer,
            encoding=sys.__stdout__.encoding if sys.__stdout__ else "utf-8",
            errors=errors,
            line_buffering=line,
            write_through=write and not with_buffer,
        )
        raw.name = name  # type: ignore[misc]  # as Python's own: "<stdout>", not 1
        return text

    errors = sys.__stdout__.errors if sys.__stdout__ else "strict"
    sys.stdin = sys.__stdin__ = stream(0, "<stdin>", errors)
    sys.stdout = sys.__stdout__ = stream(1, "<stdout>", errors)
    sys.stderr = sys.__stderr__ = stream(2, "<stderr>", "backslashreplace")


def become_child(request: dict[str, Any], fds: list[int], closing: list[int]) -> None:
    die_with_parent()
    os.setsid()
    for fd in closing:
        os.close(fd)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.path[0] = os.getcwd()  # `python -m` puts the working directory first, not this folder
    sys.modules.pop("launch", None)  # a user's own launch.py must be importable
    sys.argv = [request["module"], *request["args"]]  # runpy puts the module's file first
    rebuild_stdio(request["env"])
    if "torch" in sys.modules:
        sys.modules["torch"].seed()
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()


def serve(warm_dir: str, key: str) -> dict[str, Any]:
    """Fork children until the owner exits; returns only in a child, with its request."""
    if env_key(dict(os.environ)) != key:
        log("started with another environment's key")
        sys.exit(1)
    log(f"for {' '.join(f'{k}={v}' for k, v in key_items(dict(os.environ)))}")
    owner = os.pidfd_open(int(os.environ[OWNER_ENV]))
    for name in os.environ.get(PRELOAD_ENV, PRELOAD).split(","):
        if name:
            importlib.import_module(name)
    if threading.active_count() != 1:
        log("the imports started threads: forking is not safe")
        sys.exit(1)
    path = os.path.join(warm_dir, key + ".sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(path + ".tmp")
    server.listen(64)
    os.rename(path + ".tmp", path)  # launchers connect only once it listens
    sel = selectors.DefaultSelector()
    sel.register(server, selectors.EVENT_READ, "accept")
    sel.register(owner, selectors.EVENT_READ, "owner")
    # pidfd -> (pid, the launcher's connection; None once the launcher is gone)
    children: dict[int, tuple[int, socket.socket | None]] = {}
    sys.stdout.flush()
    sys.stderr.flush()

    def on_event(what: Any) -> dict[str, Any] | None:
        """One ready file; in a new child, its request."""
        if what == "owner":
            sys.exit(0)
        if what == "accept":
            conn, _ = server.accept()
            try:
                data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                request = json.loads(data)
            except (OSError, ValueError) as exc:
                log(f"unreadable request: {exc}")
                conn.close()
                return None
            if request.get("key") != key or len(fds) != 3:
                conn.send(b"no: wrong environment")
                conn.close()
                for fd in fds:
                    os.close(fd)
                return None
            closing = [server.fileno(), owner, sel.fileno(), conn.fileno()]
            closing += list(children) + [c.fileno() for _, c in children.values() if c is not None]
            pid = os.fork()
            if pid == 0:
                try:
                    become_child(request, fds, closing)
                except BaseException:  # never back into the loop as a second server
                    traceback.print_exc()
                    os._exit(1)
                return request
            for fd in fds:
                os.close(fd)
            pidfd = os.pidfd_open(pid)
            children[pidfd] = (pid, conn)
            sel.register(pidfd, selectors.EVENT_READ, ("exit", pidfd, pid))
            sel.register(conn, selectors.EVENT_READ, ("conn", pidfd, pid))
            conn.send(f"pid {pid}".encode())
            log(f"forked {pid}: {request['module']}")
            return None
        kind, pidfd, pid = what
        if children.get(pidfd, (None, None))[0] != pid:
            return None  # an event of this batch for a child ended earlier in the batch
        conn = children[pidfd][1]
        if kind == "exit":
            _, status, usage = os.wait4(pid, 0)
            log(f"ended {pid}: {usage.ru_utime + usage.ru_stime:.2f} s of CPU")
            code = os.waitstatus_to_exitcode(status)
            with_status = f"signal {-code}" if code < 0 else f"exit {code}"
            if conn is not None:
                with contextlib.suppress(OSError):  # the launcher may be gone
                    conn.send(with_status.encode())
                sel.unregister(conn)
                conn.close()
            sel.unregister(pidfd)
            os.close(pidfd)
            del children[pidfd]
            return None
        assert conn is not None
        try:
            msg = conn.recv(256).decode()
        except OSError:
            msg = ""
        sig = int(msg.split()[1]) if msg.startswith("signal ") else signal.SIGKILL
        if not msg:  # the launcher died: so does its child, as with PR_SET_PDEATHSIG
            sel.unregister(conn)
            conn.close()
            children[pidfd] = (pid, None)
        with contextlib.suppress(ProcessLookupError):  # it has just exited
            signal.pidfd_send_signal(pidfd, sig)
        return None

    while True:
        for sel_key, _ in sel.select():
            try:
                job = on_event(sel_key.data)
            except Exception:  # one request's trouble must not end the others' children
                log(traceback.format_exc())
                continue
            if job is not None:
                return job


if __name__ == "__main__":
    job = serve(sys.argv[1], sys.argv[2])
    # The child: run the module as `python -m` would, at the top level, so that its exit (a
    # return, sys.exit, an uncaught exception) is an interpreter's exit.
    runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
