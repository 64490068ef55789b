"""Training checkpoints sharded the way an FSDP2 run saves them: torch.distributed.checkpoint (R28).

A sharded checkpoint is a directory. DCP's own files hold the tensors: each rank writes the shards
it owns of the model and of the optimizer state (`__<rank>_<n>.distcp`, what torchtitan's
CheckpointManager writes) and rank 0 the `.metadata` index. Beside them, one small `rank<r>.pt` per
rank holds what is not a tensor shard: scheduler, scaler, that rank's RNG, the data position, the
step and the optimizer's param groups. No rank ever holds the whole model (the full-state-dict
gather is what runs out of memory or hangs at scale), and a load at another world size is DCP's
own resharding: each rank reads the saved chunks that overlap the shards it now owns.

Safe loading (R17) holds for the directory as for a file: the record's hash covers every file's
name, size and sha256 and is checked first; only tensors go into DCP's files, so DCP never has a
non-tensor item to unpickle (a checkpoint with one is refused); `rank<r>.pt` is read with
`weights_only=True`; and DCP's `.metadata` (a pickle) is read by an unpickler that admits DCP's
metadata classes and torch's dtypes, sizes and layouts, nothing else.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from ..checks.finiteness import finite_equal
from ..safe_load import UnsafeLoadError, check_torch_version, load_checkpoint, verify_provenance
from . import state as dist_state

KINDS = ("sharded", "full")
EXTRA = "rank{}.pt"
MIB = 2**20


def kind_for(declared: str, strategy: str) -> str:
    """The checkpoint kind of a configuration: the declared one, else sharded under FSDP."""
    if declared:
        return declared
    return "sharded" if strategy == "fsdp" else "full"


def _split_optimizer(osd: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The optimizer state's tensors (DCP's, sharded) and its plain values (the rank file's)."""
    tensors: dict[str, Any] = {}
    plain: dict[str, Any] = {}
    for name, entry in osd["state"].items():
        for key, value in entry.items():
            (tensors if torch.is_tensor(value) else plain).setdefault(name, {})[key] = value
    return tensors, plain


def tensor_state(state) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model, optimizer) state dicts under the user's names: DTensor shards under FSDP2, plain
    tensors in one process. The optimizer's lazily created moments exist even before a step."""
    # torch.distributed.checkpoint takes ~0.2 s to import: only a sharded checkpoint loads it.
    from torch.distributed.checkpoint.state_dict import get_state_dict

    return get_state_dict(state.model, state.optimizer)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    # DCP warns that it "assumes a single process" when no group exists: that is the point here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


def save_sharded(
    state, path: Path, extra: Mapping[str, Any], edit: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Write `path` (a directory, new) as every rank's shards; this rank's seconds and bytes.

    A collective under a process group: every rank calls it. The directory appears whole or not
    at all: the ranks write into a temporary one that rank 0 renames once every rank is done.
    `extra` is the non-tensor training state (scheduler, scaler, rng, data, step); `edit` may
    spoil a copy of it (the resume check's test hook).
    """
    # torch.distributed.checkpoint takes ~0.2 s to import: only a sharded checkpoint loads it.
    import torch.distributed.checkpoint as dcp

    t0 = time.perf_counter()
    rank = dist_state.rank()
    tmp = dist_state.from_rank0(path.with_name(f".{path.name}.{os.getpid()}.tmp"))
    msd, osd = tensor_state(state)
    optim_tensors, optim_plain = _split_optimizer(osd)
    if dist_state.is_rank0():
        tmp.mkdir(parents=True)
    dist_state.barrier()
    with _quiet():
        dcp.save(
            {"model": msd, "optim": optim_tensors},
            storage_writer=dcp.FileSystemWriter(str(tmp), sync_files=True),
            no_dist=not dist_state.active(),
        )
    own = dict(extra) | {
        "param_groups": osd["param_groups"],
        "optim_plain": optim_plain,
        "world_size": dist_state.world(),
        "rank": rank,
    }
    if edit is not None:
        edit(own)
    torch.save(own, tmp / EXTRA.format(rank))
    with open(tmp / EXTRA.format(rank), "rb") as fh:
        os.fsync(fh.fileno())
    seconds = time.perf_counter() - t0
    written = sum(f.stat().st_size for f in tmp.iterdir() if _written_by(f.name, rank))
    dist_state.barrier()
    if dist_state.is_rank0():
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    dist_state.barrier()
    return {"save_s": round(seconds, 6), "written_mb": round(written / MIB, 4), "rank": rank}


def _written_by(name: str, rank: int) -> bool:
    return name.startswith(f"__{rank}_") or name == EXTRA.format(rank) or (rank == 0 and name == ".metadata")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def discard(path: Path) -> None:
    """Remove a sharded checkpoint directory this process made (a failed attempt's)."""
    shutil.rmtree(path, ignore_errors=True)


# ------------------------------------------------------------------------------ loading

# What DCP's `.metadata` pickle may name: its own dataclasses and torch's plain descriptors.
_METADATA_MODULES = {
    "torch.distributed.checkpoint.metadata": None,
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo", "_StoragePrefix"},
    "torch.distributed.checkpoint.planner": {"LoadItemType", "WriteItemType"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "collections": {"OrderedDict"},
    "pathlib": {"PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"},  # the checkpoint id
    "builtins": {"set", "frozenset", "slice"},
}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        allowed = _METADATA_MODULES.get(module, set())
        if module in _METADATA_MODULES and (allowed is None or name in allowed):
            return super().find_class(module, name)
        if module == "torch":
            value = getattr(torch, name, None)
            if isinstance(value, torch.dtype | torch.memory_format | torch.layout):
                return value
        raise UnsafeLoadError(f"DCP metadata asks for {module}.{name}, which a checkpoint index never needs")


def read_metadata(path: Path):
    """DCP's `.metadata` index through the restricted unpickler; refused if it holds a non-tensor."""
    # torch.distributed.checkpoint takes ~0.2 s to import: only a sharded checkpoint loads it.
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata

    index = path / ".metadata"
    if not index.is_file():
        raise UnsafeLoadError(f"{path}: refused: no .metadata index (not a complete sharded checkpoint)")
    try:
        metadata = _MetadataUnpickler(io.BytesIO(index.read_bytes())).load()
    except UnsafeLoadError as exc:
        raise UnsafeLoadError(f"{index}: refused: {exc}") from None
    except Exception as exc:
        raise UnsafeLoadError(f"{index}: refused: unreadable index ({type(exc).__name__})") from None
    if not isinstance(metadata, Metadata):
        raise UnsafeLoadError(f"{index}: refused: not a DCP index")
    for key, item in metadata.state_dict_metadata.items():
        if isinstance(item, BytesStorageMetadata):
            # DCP would torch.load(weights_only=False) it: never.
            raise UnsafeLoadError(f"{path}: refused: {key} is not a tensor (DCP would unpickle it)")
    return metadata


def _reader(path: Path):
    """DCP's file reader with the `.metadata` read through the restricted unpickler."""
    # torch.distributed.checkpoint takes ~0.2 s to import: only a sharded checkpoint loads it.
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any):
            metadata = read_metadata(path)
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader(str(path))


def read_extra(path: Path, provenance: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """This rank's non-tensor state (weights_only), and a note when it is another rank's."""
    rank, world = dist_state.rank(), dist_state.world()
    own = path / EXTRA.format(rank)
    first = load_checkpoint(path / EXTRA.format(0), _inner(path, EXTRA.format(0), provenance))
    saved_world = int(first["world_size"])
    if saved_world == world and own.is_file():
        if rank == 0:
            return first, ""
        return load_checkpoint(own, _inner(path, own.name, provenance)), ""
    note = f"saved on {saved_world} rank(s), loaded on {world}: the RNG streams are rank 0's"
    return first, note


def _inner(path: Path, name: str, provenance: Mapping[str, Any]) -> dict[str, Any]:
    # The directory's hash was checked before any of its files is read: each file is vouched for.
    from ...core.hashing import sha256_file

    f = path / name
    if not f.is_file():
        raise UnsafeLoadError(f"{f}: refused: file not found in the sharded checkpoint")
    return {"path": str(f), "sha256": sha256_file(f), "size": f.stat().st_size}


def load_sharded(state, path: Path, provenance: Mapping[str, Any]) -> dict[str, Any]:
    """Read a sharded checkpoint into `state` at this process's world size (any: DCP reshards).

    Returns the non-tensor state (for `checkpoint.restore_rest`) with `note` set when the saved
    world size differs. A collective under a process group: every rank calls it.
    """
    # torch.distributed.checkpoint takes ~0.2 s to import: only a sharded checkpoint loads it.
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    check_torch_version()
    verify_provenance(path, provenance)
    read_metadata(path)  # refused here, in one line, before DCP reads anything
    extra, note = read_extra(path, provenance)
    msd, osd = tensor_state(state)  # this rank's shards at the current world size: DCP fills them
    optim_tensors, _ = _split_optimizer(osd)
    with _quiet():
        dcp.load(
            {"model": msd, "optim": optim_tensors},
            storage_reader=_reader(path),
            no_dist=not dist_state.active(),
        )
    optim_state = {
        name: dict(optim_tensors.get(name, {})) | dict(extra.get("optim_plain", {}).get(name, {}))
        for name in set(optim_tensors) | set(extra.get("optim_plain", {}))
    }
    set_state_dict(
        state.model,
        state.optimizer,
        model_state_dict=msd,
        optim_state_dict={"state": optim_state, "param_groups": extra["param_groups"]},
    )
    return extra | {"note": note}


def verify_sharded(state, path: Path, provenance: Mapping[str, Any]) -> list[str]:
    """Read the checkpoint back into copies of this rank's shards; the names that differ.

    The save phase's read-back: every rank compares its own shards, bitwise (NaN where NaN).
    """
    # torch.distributed.checkpoint takes ~0.2 s to import: only a sharded checkpoint loads it.
    import torch.distributed.checkpoint as dcp

    check_torch_version()
    verify_provenance(path, provenance)
    read_metadata(path)
    read_extra(path, provenance)  # weights_only, refused if unsafe
    msd, osd = tensor_state(state)
    optim_tensors, _ = _split_optimizer(osd)
    live = {"model": msd, "optim": optim_tensors}
    blank = _zeros_like(live)
    with _quiet():
        dcp.load(blank, storage_reader=_reader(path), no_dist=not dist_state.active())
    differ: list[str] = []
    _compare(live, blank, "", differ, finite_equal)
    return differ


def _zeros_like(tree: Any) -> Any:
    if isinstance(tree, Mapping):
        return {k: _zeros_like(v) for k, v in tree.items()}
    return torch.zeros_like(tree) if torch.is_tensor(tree) else tree


def _local(t: torch.Tensor) -> torch.Tensor:
    local = getattr(t, "to_local", None)
    return (local() if local is not None else t).detach().cpu()


def _compare(a: Any, b: Any, prefix: str, differ: list[str], equal) -> None:
    if isinstance(a, Mapping):
        for k in a:
            _compare(a[k], b.get(k), f"{prefix}{k}.", differ, equal)
    elif torch.is_tensor(a) and (b is None or not equal(_local(a), _local(b))):
        differ.append(prefix.rstrip("."))
