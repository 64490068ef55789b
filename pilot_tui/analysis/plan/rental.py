"""The whole rental (R27): where the days go besides the steps, each from a measured figure.

- restarts: a fresh process to its first update after resume (the `resume` row's new process),
  plus re-reading the data up to a mid-package position (its timed skip of N batches), plus half
  a save interval of updates redone;
- disk: one checkpoint's bytes (the `save` row's artifact) × the checkpoints kept (+ the one being
  written) against the free space of `plan.checkpoint_dir`'s file system, measured now;
- saves against the collective timeout on several ranks: a save that holds rank 0 while the others
  wait at the next collective longer than the timeout kills the run;
- throughput: non-padding tokens (the attention mask, not the padded length) and examples per
  second of the steady phase; on a GPU, the model FLOPs utilisation against the device's peak.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from ...core.rows import PhaseRow, num
from ...core.verdict import FAIL, PASS, WARN
from ..mfu import mfu
from .inputs import Facts, number_at, table

# Under 20 % of the free space left after the checkpoints, the disk line warns.
DISK_HEADROOM = 0.20
# torch.distributed's default process-group timeout for NCCL (10 minutes).
NCCL_DEFAULT_TIMEOUT_S = 600.0
# A save that takes more than this share of the collective timeout warns.
SAVE_TIMEOUT_SHARE = 0.5


@dataclass(frozen=True)
class Restart:
    """One restart of the real run from its last checkpoint, each part measured."""

    # A fresh process: interpreter, imports, model, checkpoint load and its first update.
    process_s: float
    # Re-reading the data to a mid-package position: measured per example × how many; None
    # when the resume row did not time a skip (records made before it did).
    skip_s: float | None
    skip_examples: int
    # Half a save interval of updates redone (the work since the last save is lost).
    redo_s: float

    @property
    def total_s(self) -> float:
        return self.process_s + (self.skip_s or 0.0) + self.redo_s


def restart(
    facts: Facts, updates: int, epochs: float, per_rank_batch: int, step_s: float, saves: int
) -> Restart | None:
    """One restart of a run of `updates` updates, from the `resume` row; None when it did not run."""
    row = facts.row("resume")
    if row is None or not row.ok:
        return None
    fresh = table(row.details, "new_process")
    seconds = number_at(fresh, "seconds")
    if seconds is None:
        return None
    inside = table(fresh, "inside_s")
    n = max(int(row.detail("n")), 1)
    train = num(number_at(inside, "train"))
    # The process up to its first update: all of it but the n updates, plus one of them.
    process_s = seconds - train + train / n
    per_example = _skip_per_example(row)
    per_epoch = updates / max(epochs, 1e-9)
    # A restart mid-package re-reads the current epoch up to its position (a loader that skips by
    # iterating, as transformers' skip_first_batches does).
    position = (updates // 2) % max(int(per_epoch), 1)
    skipped = position * per_rank_batch
    interval = updates / max(saves, 1)
    return Restart(
        process_s=round(process_s, 4),
        skip_s=None if per_example is None else round(per_example * skipped, 4),
        skip_examples=skipped,
        redo_s=round(interval / 2 * step_s, 4),
    )


def _skip_per_example(row: PhaseRow) -> float | None:
    """Seconds to draw and collate one example, from the resume row's timed skip (its own
    configuration's batches: per example, it holds for any microbatch)."""
    skip_s, examples = number_at(row.details, "skip_s"), row.detail("skip_examples")
    return skip_s / examples if skip_s is not None and examples > 0 else None


@dataclass(frozen=True)
class Disk:
    """The checkpoints the run keeps against the free space where they go."""

    checkpoint_dir: str
    free_gb: float
    checkpoint_mb: float
    copies: int
    need_gb: float
    status: str
    reason: str


def checkpoint_folder(facts: Facts, record_dir: Path | None) -> Path:
    """`plan.checkpoint_dir` relative to the campaign file, else the records' folder."""
    declared = facts.spec.plan.checkpoint_dir
    if declared:
        base = Path(facts.spec_path).parent if facts.spec_path else Path.cwd()
        return (base / declared).resolve()
    return (record_dir or Path.cwd()).resolve()


def _existing(folder: Path) -> Path:
    """The folder, or its nearest existing parent (a folder the run will create lives there)."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def free_bytes(folder: Path) -> int:
    """Free bytes where `folder` is (or will be) now: the one live figure of a plan."""
    return shutil.disk_usage(_existing(folder)).free


def disk(facts: Facts, saves: int, record_dir: Path | None) -> Disk | None:
    """Bytes of the kept checkpoints (+ one being written) against the free space measured now."""
    save = facts.row("save")
    if save is None or saves < 1:
        return None
    artifact = table(save.details, "artifact")
    size = number_at(artifact, "size")
    if size is None:
        return None
    keep = facts.spec.plan.keep
    # Keeping every save: `saves` files at the end. Rotating: `keep` kept, and the next one is
    # written before the oldest goes.
    copies = saves if not keep or keep >= saves else keep + 1
    folder = checkpoint_folder(facts, record_dir)
    free = free_bytes(folder)
    need = size * copies
    kept = f"{keep} kept + 1 being written" if keep and keep < saves else f"every one of {saves} kept"
    if need > free:
        status = FAIL
        reason = f"the checkpoints do not fit: {need / 2**30:.2f} GiB needed, {free / 2**30:.2f} GiB free"
    elif need > (1 - DISK_HEADROOM) * free:
        status = WARN
        reason = (
            f"under {DISK_HEADROOM:.0%} headroom: {(free - need) / 2**30:.2f} GiB left after the checkpoints"
        )
    else:
        status = PASS
        reason = f"{(free - need) / free:.0%} of the free space left after the checkpoints"
    return Disk(
        checkpoint_dir=str(folder),
        free_gb=round(free / 2**30, 3),
        checkpoint_mb=round(size / 2**20, 3),
        copies=copies,
        need_gb=round(need / 2**30, 3),
        status=status,
        reason=f"{kept}; {reason}",
    )


@dataclass(frozen=True)
class SaveTimeout:
    """One save against the collective timeout of a multi-rank run."""

    save_s: float
    timeout_s: float
    timeout_source: str
    status: str
    reason: str


def save_timeout(facts: Facts, save_s: float, ranks: int) -> SaveTimeout | None:
    """On several ranks: the measured save against the collective timeout; None on one process."""
    spec = facts.spec
    distributed = spec.distributed.strategy != "none"
    if not distributed and ranks <= 1 and spec.plan.gpus <= 1:
        return None
    if distributed:
        timeout, source = spec.distributed.timeout_s, "[distributed] timeout_s"
    else:
        timeout, source = NCCL_DEFAULT_TIMEOUT_S, "NCCL's default process-group timeout"
    share = save_s / timeout
    if share > SAVE_TIMEOUT_SHARE:
        status = WARN
        reason = (
            f"one save takes {save_s:.3g} s, {share:.0%} of the {timeout:g} s collective timeout ({source}): "
            "the other ranks wait at their next collective; raise the timeout or save asynchronously"
        )
    else:
        status = PASS
        reason = (
            f"one save takes {save_s:.3g} s, {share:.0%} of the {timeout:g} s collective timeout ({source})"
        )
    return SaveTimeout(round(save_s, 4), timeout, source, status, reason)


@dataclass(frozen=True)
class Throughput:
    """What one configuration's steady phase processed per second."""

    id: str
    tokens_per_s: float | None
    examples_per_s: float | None
    # Model FLOPs utilisation (6 × parameters × tokens/s over the device's peak), on a GPU only.
    mfu: float | None = None
    mfu_basis: str = ""


def throughput(facts: Facts, config: str, precision: str) -> Throughput | None:
    steady = facts.row("steady", config)
    if steady is None:
        return None
    tokens = number_at(steady.details, "tokens_per_s")
    examples = number_at(steady.details, "examples_per_s")
    mfu, basis = _mfu(facts, tokens, precision)
    return Throughput(config, tokens, examples, mfu, basis)


def _mfu(facts: Facts, tokens_per_s: float | None, precision: str) -> tuple[float | None, str]:
    """The steady row's tokens (one rank's) over one GPU's dense peak (analysis/mfu.py, whose
    peaks are the machine check's datasheet table)."""
    load = facts.row("load")
    if tokens_per_s is None or load is None or not facts.environment.device.startswith("cuda"):
        return None, ""
    parameters = int(load.detail("parameters"))
    trainable = int(load.detail("trainable_parameters", parameters))
    gpu = facts.stack.gpus[0].name if facts.stack.gpus else ""
    if parameters <= 0:
        return None, "no parameter count in the load row"
    found = mfu(
        tokens_per_s, parameters, trainable, gpu or "this GPU", precision, facts.environment.tf32_matmul
    )
    if found.get("mfu") is None:
        return None, str(found.get("why", ""))
    basis = f"{found['flops_per_token']:,.0f} FLOPs a token × tokens/s over {found['peak']}"
    return round(found["mfu"], 4), basis


def part_bar(parts: list[tuple[str, float]], width: int = 40) -> str:
    """A text bar with one letter per part, each part's share of the width (at least one cell if > 0)."""
    total = sum(v for _, v in parts)
    if total <= 0:
        return ""
    cells = [(letter, max(1, round(width * v / total)) if v > 0 else 0) for letter, v in parts]
    return "".join(letter * n for letter, n in cells)
