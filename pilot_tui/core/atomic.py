"""One atomic writer for every file the tool leaves on disk, and the sweeper of its temp files. Pure.

Records, checkpoints, exported weights, replay outputs and fresh-process results are all written
the same way: into a temp file beside the target, fsync, `os.replace` (or a hard link when the
target must not exist yet), fsync the folder. A crash, an out-of-memory or a SIGKILL at any
moment leaves the previous complete file or the new one, never a torn file — and at worst a temp
file, which this module names and, once its writer is dead, sweeps.

The temp name is `.<target name>.<writer pid>.<random>.tmp`: the pid is what lets the sweeper
tell a killed writer's leftover from a live writer's file in progress. Writer and sweeper share
this module so the format has one definition.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

TEMP_SUFFIX = ".tmp"
# The target name may itself hold dots and digits (`demo.v2-20240101.toml`).
_TEMP_NAME = re.compile(r"\.(?P<target>.+)\.(?P<pid>\d+)\.[^.]+\.tmp")


def temp_prefix(target: Path) -> str:
    """The start of a temp name for `target` written by this process (`mkstemp`/`mkdtemp` add the rest)."""
    return f".{target.name}.{os.getpid()}."


def temp_writer(name: str) -> int | None:
    """The pid of the writer of a temp file named `name`; None when the name is not one of ours."""
    match = _TEMP_NAME.fullmatch(name)
    return int(match["pid"]) if match else None


def write_atomic(path: Path, write: Callable[[str], None], *, exclusive: bool = False) -> None:
    """Replace `path` with what `write(temp_path)` writes, so that readers see the old file or the
    new one, nothing else (the file is world-readable, 0644: records and artifacts are shared).

    `exclusive`: the file must not exist yet (a new record): FileExistsError rather than
    overwrite another session's file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600
        os.close(fd)
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        if exclusive:
            os.link(tmp, path)  # atomic, and fails if the name is taken
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    # The rename itself must reach the disk, or a power cut can bring the old name back.
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_text_atomic(path: Path, text: str, *, exclusive: bool = False) -> None:
    """`write_atomic` of UTF-8 text."""
    write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"), exclusive=exclusive)


def sweep_stale_temp_files(folder: Path) -> list[Path]:
    """Remove temp files left by a writer that was killed mid-write (their pid is dead).

    Recursive: the records folder and the artifact folders beside the records, where a runner
    killed during a checkpoint save, or a fresh process killed while writing its result, leaves
    its temp file. A live writer's temp file is kept.
    """
    removed: list[Path] = []
    if not folder.is_dir():
        return removed
    temps = [
        Path(root) / name
        for root, _, names in os.walk(folder)  # never follows a symlink out of the folder
        for name in names
        if name.startswith(".") and name.endswith(TEMP_SUFFIX)
    ]
    for tmp in temps:
        pid = temp_writer(tmp.name)
        if pid is None:
            continue  # not one of ours
        # Our own pid counts as alive: another session in this process may be mid-write.
        if _alive(pid):
            continue
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True
