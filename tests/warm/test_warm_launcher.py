"""The suite's launcher behaves as `python -m` does for its caller (tests/warm/launch.py).

Every test that starts a runner relies on this: if the launcher changed a pipe, an exit status,
the environment or the random seeds, those tests would check something other than what users run.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CHILD = """
import json, os, random, signal, sys, time
mode = sys.argv[1]
# torch (imported by the warm process already) only where its seed is compared: the plain runs
# this is compared with would import it for seconds.
torch = __import__("torch") if mode == "seed" else None

def on_term(signum, frame):
    print("term", flush=True)
    sys.exit(5)

signal.signal(signal.SIGTERM, on_term)
line = sys.stdin.readline().strip()
print(json.dumps({
    "pid": os.getpid(), "argv": sys.argv[1:], "cwd": os.getcwd(), "path0": sys.path[0],
    "mark": os.environ.get("WARM_TEST_MARK"), "line": line, "random": random.random(),
    "torch_seed": torch.initial_seed() if torch else None, "stdout_name": sys.stdout.name,
    "threads": torch.get_num_threads() if torch else None,
    "buffered": sys.stdout.line_buffering or not sys.stdout.write_through,
}), flush=True)
print("to stderr", file=sys.stderr)
if mode == "seed":
    sys.exit(0)
if mode == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "wait":
    time.sleep(60)
if mode == "raise":
    raise RuntimeError("boom")
sys.exit(int(mode))
"""


def launcher() -> list[str]:
    words = shlex.split(os.environ.get("PILOT_TUI_LAUNCHER", ""))
    if not words:
        pytest.skip("the suite runs without the warm launcher (TESTS_PLAIN_SPAWN)")
    return words


def wait_warm(env: dict[str, str]) -> None:
    """The warm process for this environment is started with the session: wait till it listens."""
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from launch import env_key
    finally:
        sys.path.pop(0)
    sock = Path(env["TESTS_WARM_DIR"]) / f"{env_key(env)}.sock"
    deadline = time.monotonic() + 120
    while not sock.exists():
        assert time.monotonic() < deadline, "the warm process never listened"
        time.sleep(0.2)


def start(tmp_path: Path, words: list[str], mode: str) -> subprocess.Popen[str]:
    (tmp_path / "warm_child.py").write_text(CHILD)
    env = dict(os.environ, WARM_TEST_MARK="mark-1")
    return subprocess.Popen(
        [*words, "warm_child", mode],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run(tmp_path: Path, words: list[str], mode: str) -> tuple[int, dict, str]:
    proc = start(tmp_path, words, mode)
    out, err = proc.communicate("hello\n", timeout=120)
    return proc.returncode, json.loads(out.splitlines()[0]), err


def test_a_warm_child_is_python_dash_m_for_its_caller(tmp_path: Path) -> None:
    words = launcher()
    wait_warm(dict(os.environ))
    plain = [sys.executable, "-m"]
    for mode, code in (("0", 0), ("7", 7), ("kill", -signal.SIGKILL), ("raise", 1)):
        warm_code, warm, warm_err = run(tmp_path, words, mode)
        plain_code, cold, cold_err = run(tmp_path, plain, mode)
        assert warm_code == plain_code == code, mode
        for key in ("argv", "cwd", "path0", "mark", "line", "stdout_name", "buffered"):
            assert warm[key] == cold[key], key
        assert warm["argv"] == [mode] and warm["line"] == "hello" and warm["path0"] == str(tmp_path)
        assert warm_err.splitlines()[0] == cold_err.splitlines()[0] == "to stderr"
        if mode == "raise":
            assert warm_err.splitlines()[-1] == cold_err.splitlines()[-1] == "RuntimeError: boom"
    # It was forked (not the launcher's own pid, as an exec would be), and seeded anew.
    first, second = run(tmp_path, words, "seed")[1], run(tmp_path, words, "seed")[1]
    assert first["pid"] != second["pid"]
    assert first["torch_seed"] != second["torch_seed"] and first["random"] != second["random"]
    # torch's thread count, fixed when OpenMP loads in the warm process, is what a plain start gets.
    assert first["threads"] == run(tmp_path, plain, "seed")[1]["threads"]


def test_signals_reach_the_child_and_a_killed_launcher_takes_it_along(tmp_path: Path) -> None:
    words = launcher()
    wait_warm(dict(os.environ))
    proc = start(tmp_path, words, "wait")
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("hello\n")
    proc.stdin.flush()
    child = json.loads(proc.stdout.readline())["pid"]
    assert child != proc.pid
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 5 and proc.stdout.readline().strip() == "term"

    proc = start(tmp_path, words, "wait")
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("hello\n")
    proc.stdin.flush()
    child = json.loads(proc.stdout.readline())["pid"]
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while alive(child):
        assert time.monotonic() < deadline, "the child outlived its killed launcher"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
