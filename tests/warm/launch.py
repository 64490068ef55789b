"""The test suite's launcher: `python -S launch.py module args...` is `python -m module args`,
forked from a warm process that has already imported torch (zygote.py), when one is ready.

pilot-tui starts each of its own processes through it when `PILOT_TUI_LAUNCHER` names it
(pilot_tui/core/launch.py). This process stays in the child's place for its caller: the caller
holds its pid, pipes and exit status as it would the child's. It hands its stdin, stdout and
stderr to the warm process, which forks the child onto them; it passes on the signals it gets
and exits as the child did (a child killed by signal N kills this one by N). If it is killed
itself, the warm process kills the child, as the kernel does for a runner whose caller died.

A warm process holds one environment's imports: torch reads some variables when it loads
(`OMP_NUM_THREADS` among them), so each set of those gets its own warm process, started the
first time that set is asked for; that first request, and any request it cannot serve, runs as
plain `python -m` (an exec, same pid). Started without `-S` site-packages are not needed: only
the standard library is imported here, and nothing heavy.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import signal
import socket
import sys

WARM_DIR_ENV = "TESTS_WARM_DIR"
# The variables read when Python starts and when what a warm process imports (torch and
# torch._dynamo: their own settings, OpenMP's thread count, the loader, the allocator) loads.
# Anything imported later (transformers, CUDA at its first use) reads the child's environment.
KEY_PREFIXES = ("PYTHON", "LANG", "LC_", "LD_", "MALLOC_", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_")
KEY_PREFIXES += ("TORCH", "PYTORCH_")
# Of those, read later than import, so a child that has them set gets them: the stdio buffering
# (rebuilt in the child), torchrun's per-rank bookkeeping, NCCL's error handling (read when a
# group is made), inductor's cache folder (set by torch itself once it has imported inductor).
KEY_EXEMPT = (
    "PYTHONUNBUFFERED",
    "TORCHELASTIC_",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "TORCHINDUCTOR_CACHE_DIR",
)
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def key_items(env: dict[str, str]) -> list[tuple[str, str]]:
    """The variables of `env` a warm process must have been started with to serve it."""
    return sorted(
        (k, v) for k, v in env.items() if k.startswith(KEY_PREFIXES) and not k.startswith(KEY_EXEMPT)
    )


def env_key(env: dict[str, str]) -> str:
    """Which warm process may serve this environment."""
    return hashlib.sha1(json.dumps(key_items(env)).encode()).hexdigest()[:16]


def plain(module: str, args: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, "-m", module, *args])


def die_with_parent() -> None:
    # Every process pilot-tui starts dies with its starter (runner/processes/lifetime.py); this one must
    # too, or a killed caller would leave this process, and so the child, behind.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start_warm(warm_dir: str, key: str) -> None:
    """Start the warm process for this environment, detached, once (the lock file says who)."""
    try:
        os.close(os.open(os.path.join(warm_dir, key + ".lock"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except OSError:
        return  # another launcher started it, or is starting it
    zygote = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote.py")
    pid = os.fork()
    if pid == 0:  # double fork: the warm process is nobody's child here, and never a zombie
        try:
            os.setsid()
            if os.fork() == 0:
                log = os.open(os.path.join(warm_dir, key + ".log"), os.O_CREAT | os.O_WRONLY | os.O_APPEND)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(log, 1)
                os.dup2(log, 2)
                os.execv(sys.executable, [sys.executable, zygote, warm_dir, key])
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def mirror(status: bytes) -> None:
    """Exit as the child did."""
    kind, _, value = status.decode().partition(" ")
    if kind == "exit":
        os._exit(int(value))
    sig = int(value) if kind == "signal" else signal.SIGKILL  # no status: the warm process died
    with contextlib.suppress(OSError, ValueError):  # SIGKILL's disposition cannot be changed
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)


def main() -> None:
    module, args = sys.argv[1], sys.argv[2:]
    die_with_parent()
    warm_dir = os.environ.get(WARM_DIR_ENV, "")
    if not warm_dir:
        plain(module, args)
    key = env_key(dict(os.environ))
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(os.path.join(warm_dir, key + ".sock"))
    except OSError:
        conn.close()
        start_warm(warm_dir, key)
        plain(module, args)
    request = {"module": module, "args": args, "env": dict(os.environ), "cwd": os.getcwd(), "key": key}
    try:
        socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
        reply = conn.recv(256).decode()
    except OSError:  # the warm process went away before it forked: start plain
        reply = ""
    if not reply.startswith("pid "):
        conn.close()
        plain(module, args)
    # The child holds the pipes now; a copy here would keep them open after it exits.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):  # the warm process is gone; the read below says so
            conn.send(f"signal {signum}".encode())

    for sig in FORWARDED:
        signal.signal(sig, forward)
    while True:
        try:
            status = conn.recv(256)
        except InterruptedError:
            continue
        except OSError:
            status = b""  # the warm process died, and with it the child
        mirror(status)


if __name__ == "__main__":
    main()
