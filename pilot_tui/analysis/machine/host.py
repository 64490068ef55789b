"""The host's parts of the machine check, judged from measured figures (pure, no torch).

Each function takes what was measured and returns one `Check` whose message names the numbers:
the loader's shared memory, the cores its workers need, and the disks the run writes to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...core.verdict import FAIL, PASS, WARN
from ..checks import Check

GIB = 2**30
MIB = 2**20
# Below this share of free space left once the run has written, a disk warns (as the plan's does).
DISK_HEADROOM = 0.15
# torch's DataLoader default: batches each worker prepares ahead.
DEFAULT_PREFETCH = 2


def size(n: float) -> str:
    """Bytes as a person reads them: GiB from 1 GiB up, else MiB."""
    return f"{n / GIB:.3g} GiB" if abs(n) >= GIB else f"{n / MIB:.3g} MiB"


def shared_memory(
    shm_bytes: int | None, workers: int, prefetch: int, batch_bytes: int | None, batch_unknown: str = ""
) -> Check:
    """`/dev/shm` against what the loader's workers hold there at once.

    Each worker hands its batches to the trainer through shared memory, `prefetch` of them in
    flight: workers × prefetch × the largest batch's bytes. Docker gives a container 64 MB by
    default, and a loader short of it dies with a bus error or deadlocks, sometimes epochs in.
    """
    if workers == 0:
        have = f" ({size(shm_bytes)})" if shm_bytes is not None else ""
        return Check("shared_memory", PASS, f"no loader workers: the loader does not use /dev/shm{have}")
    if shm_bytes is None:
        return Check("shared_memory", WARN, f"{workers} loader workers, and /dev/shm could not be read")
    if batch_bytes is None:
        return Check(
            "shared_memory",
            PASS,
            f"/dev/shm {size(shm_bytes)} for {workers} workers × prefetch {prefetch}; not judged: "
            f"the largest batch's bytes are not known ({batch_unknown or 'no batch was collated'})",
        )
    need = workers * prefetch * batch_bytes
    numbers = f"{workers} workers × prefetch {prefetch} × {size(batch_bytes)} largest batch = {size(need)}"
    if shm_bytes < need:
        return Check(
            "shared_memory",
            WARN,
            f"/dev/shm {size(shm_bytes)} is smaller than the loader's need ({numbers}): raise it "
            "(docker run --shm-size) or use fewer workers",
        )
    return Check("shared_memory", PASS, f"/dev/shm {size(shm_bytes)} holds the loader's need ({numbers})")


def cores(available: int, workers: int, ranks: int) -> Check:
    """CPU cores against the processes the run keeps busy: each rank and each of its workers."""
    need = ranks * (workers + 1)
    what = f"{ranks} rank{'s' if ranks != 1 else ''} × ({workers} loader workers + 1)"
    if available < need:
        return Check(
            "cores",
            WARN,
            f"{available} CPU cores for {need} busy processes ({what}): the workers will wait for a core",
        )
    return Check("cores", PASS, f"{available} CPU cores for {need} busy processes ({what})")


@dataclass(frozen=True)
class Location:
    """A place the run writes, as measured: its free space and write speed, and what the run
    will write there (`need_bytes` None: not known, `need_what` says why)."""

    role: str
    path: str
    filesystem: int  # st_dev: locations on one filesystem share its free space
    free_bytes: int
    write_gbps: float | None = None
    need_bytes: int | None = None
    need_what: str = ""
    error: str = ""


def disks(locations: Sequence[Location]) -> Check:
    """Free space against what the run writes, per filesystem; a shortfall fails naming the
    location that fills first (the one whose filesystem is shortest, relative to its need)."""
    by_fs: dict[int, list[Location]] = {}
    for loc in locations:
        by_fs.setdefault(loc.filesystem, []).append(loc)
    short: list[tuple[float, str]] = []
    tight: list[str] = []
    for group in by_fs.values():
        free = min(loc.free_bytes for loc in group)
        known = [loc for loc in group if loc.need_bytes]
        need = sum(loc.need_bytes or 0 for loc in known)
        if not known:
            continue
        writers = (
            known[0].need_what
            if len(known) == 1
            else " + ".join(
                f"{loc.role} {loc.path}: {size(loc.need_bytes or 0)}, {loc.need_what}" for loc in known
            )
        )
        if need > free:
            first = max(known, key=lambda loc: loc.need_bytes or 0)
            short.append(
                (
                    need / max(free, 1),
                    f"{first.role} {first.path} fills first: {size(need)} to write ({writers}), "
                    f"{size(free)} free on its filesystem",
                )
            )
        elif need > (1 - DISK_HEADROOM) * free:
            tight.append(f"{writers}: {size(need)} of {size(free)} free, under {DISK_HEADROOM:.0%} left")
    if short:
        ordered = [msg for _, msg in sorted(short, reverse=True)]
        return Check("disks", FAIL, "disk too small: " + "; then ".join(ordered))
    unknown = [loc.role for loc in locations if loc.need_bytes is None]
    tail = f"; not known what {', '.join(unknown)} will hold" if unknown else ""
    if tight:
        return Check("disks", WARN, "disk nearly full after the run: " + "; ".join(tight) + tail)
    free = ", ".join(f"{loc.role} {size(loc.free_bytes)} free" for loc in locations)
    return Check("disks", PASS, f"{free}{tail}")
