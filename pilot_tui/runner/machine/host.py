"""The host, measured: cores, `/dev/shm`, and every place the run writes (free space and a timed
write). Real measurements only; nothing here needs a GPU."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ...analysis.machine.host import Location

SHM = Path("/dev/shm")
# Enough to get past the page cache's first absorption and short enough for every phase start.
PROBE_BYTES = 64 * 2**20
_CHUNK = os.urandom(2**20)  # incompressible, so a compressing filesystem cannot flatter the figure


def available_cores() -> int:
    """The cores this process may run on (a container's cpuset, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def shm_free_bytes(path: Path = SHM) -> int | None:
    """Free bytes of the shared-memory filesystem the loader's workers hand batches through."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def hf_caches(env: dict[str, str] | None = None) -> dict[str, Path]:
    """Where Hugging Face libraries write, resolved as huggingface_hub and datasets resolve it:
    HF_HOME (else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface), with the hub and
    datasets caches under it unless HF_HUB_CACHE / HF_DATASETS_CACHE say otherwise."""
    env = dict(os.environ if env is None else env)
    xdg = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    home = Path(env.get("HF_HOME") or Path(xdg) / "huggingface").expanduser()
    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or str(home / "hub")
    datasets = env.get("HF_DATASETS_CACHE") or str(home / "datasets")
    return {"hf_hub_cache": Path(hub).expanduser(), "hf_datasets_cache": Path(datasets).expanduser()}


def existing(folder: Path) -> Path:
    """The folder, or its nearest existing parent: a folder the run will create lives there."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def write_gbps(folder: Path, nbytes: int = PROBE_BYTES) -> float:
    """Write `nbytes` to a new file in `folder`, fsync it, and return GB/s (10⁹ bytes); the
    file is removed whatever happens. fsync is counted: a checkpoint is not saved until it is."""
    fd, name = tempfile.mkstemp(prefix=".pilot-machine-", dir=folder)
    try:
        t0 = time.perf_counter()
        left = nbytes
        while left > 0:
            left -= os.write(fd, _CHUNK[: min(left, len(_CHUNK))])
        os.fsync(fd)
        seconds = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(name)
    return nbytes / seconds / 1e9


@dataclass(frozen=True)
class Place:
    """A place the run writes and what it will write there (None: not known, `what` says why)."""

    role: str
    path: Path
    need_bytes: int | None = None
    what: str = ""


def measure_places(places: list[Place], probe_bytes: int = PROBE_BYTES) -> list[Location]:
    """Free space and write speed of each place; one timed write per filesystem (places on one
    filesystem share its figure), measured in the nearest existing folder."""
    speeds: dict[int, float | None] = {}
    errors: dict[int, str] = {}
    out = []
    for place in places:
        folder = existing(place.path.expanduser().resolve())
        try:
            fs = os.stat(folder).st_dev
            free = shutil.disk_usage(folder).free
        except OSError as exc:
            out.append(
                Location(place.role, str(place.path), -1, 0, None, place.need_bytes, place.what, str(exc))
            )
            continue
        if fs not in speeds:
            try:
                speeds[fs] = write_gbps(folder, probe_bytes)
            except OSError as exc:  # read-only, no permission, full: the figure is the error
                speeds[fs], errors[fs] = None, f"{folder}: {exc.strerror or exc}"
        out.append(
            Location(
                role=place.role,
                path=str(place.path),
                filesystem=fs,
                free_bytes=free,
                write_gbps=speeds[fs],
                need_bytes=place.need_bytes,
                need_what=place.what,
                error=errors.get(fs, ""),
            )
        )
    return out
