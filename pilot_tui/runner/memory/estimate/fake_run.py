"""One training update and one evaluation pass under fake tensors, measured by PyTorch's trackers (R23).

Nothing is allocated: under `FakeTensorMode` every tensor carries its shape, dtype and device but
no data, and `MemTracker` (or `FSDPMemTracker` over a fake process group of N ranks) counts the
bytes each one would hold, by category, and the peak of their sum. What runs is the runner's own
update: the task's forward and loss, autocast for the precision, gradient clipping and the
optimizer, as every update after the first runs it: the optimizer state resident and, of several
microbatches, one that meets the gradients already there (docs/estimate.md says why one forward
and backward stands for them all). The optimizer is the configuration's own, built by
runner/loop/optimizers.py as the training state builds it.

The simulation runs on fake *CPU* tensors: a CPU-only torch cannot run autograd on fake CUDA
tensors. Where the GPU differs, the run does what the GPU would: every block is rounded up to the
CUDA caching allocator's 512 bytes, AdamW takes its CUDA default (foreach, with its temporary),
and the optimizer's host-side `step` counters are left out of the device's figures (a fused
optimizer keeps them on the device: they stay in).
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from ....core.reasons import exception_line
from ....tasks.contract import Task
from ...checks import objective
from ...loop import optimizers
from ...loop.training import autocast
from .. import heap

MIB = 1024 * 1024
# The CUDA caching allocator never hands out less than this (c10/cuda/CUDACachingAllocator.cpp).
ALLOCATOR_BLOCK = 512
STRATEGIES = ("none", "ddp", "fsdp")


@dataclass(frozen=True)
class FakeConfig:
    """One configuration to estimate, per rank."""

    name: str
    microbatch: int
    accumulation: int
    max_length: int
    precision: str
    activation_checkpointing: bool
    strategy: str = "none"
    gpus: int = 1
    eval_microbatch: int = 0
    grad_clip: float = 1.0
    weight_decay: float = 0.0
    # Round every block like the CUDA allocator (False gives the exact tensor bytes, for tests).
    allocator_rounding: bool = True
    # False runs the same update on real tensors, tracked the same way: the check that the fake
    # run reproduces a real one (tests, tiny models only: it allocates).
    fake: bool = True
    optimizer: str = "adamw"
    # Estimable dimensions (core/dimensions.py) without a field here, as (name, value).
    extra: tuple[tuple[str, Any], ...] = ()

    def params(self) -> dict[str, Any]:
        out = asdict(self)
        del out["extra"]
        return out | dict(self.extra)


@dataclass
class ModelSource:
    """What the fake run needs from a task: a model, batches, and how to switch checkpointing.

    `batch(microbatch, length, train)` returns a *real* (small, integer) CPU batch of the longest
    sequences the configuration admits; it is turned into fake tensors inside the fake mode.
    """

    task: Task
    build: Callable[[], nn.Module]
    batch: Callable[[int, int, bool], dict[str, torch.Tensor]]
    set_checkpointing: Callable[[nn.Module, bool], None] | None = None
    description: str = ""


class NotEstimable(Exception):
    """Fake tensors cannot follow the model: `op` names the operator (or step) that failed."""

    def __init__(self, op: str, reason: str) -> None:
        super().__init__(reason)
        self.op = op
        self.reason = reason


# ------------------------------------------------------------------ allocator rounding


@contextlib.contextmanager
def allocator_rounding(block: int) -> Iterator[None]:
    """Round every tracked storage up to `block` bytes, as the CUDA allocator does, on any device.

    The trackers round only storages on a CUDA device; the fake run's tensors are on the CPU.
    """
    # torch.distributed._tools takes over a second to import: only an estimate loads it.
    from torch.distributed._tools import mem_tracker

    info = getattr(mem_tracker, "_WeakRefInfo", None)
    original = getattr(info, "_calculate_mem_consumed", None)
    if not block or original is None:
        yield
        return

    def rounded(self: Any) -> int:
        mem = self.size * self.element_size
        return -(-mem // block) * block

    info._calculate_mem_consumed = rounded  # type: ignore[union-attr]
    try:
        yield
    finally:
        info._calculate_mem_consumed = original  # type: ignore[union-attr]


def rounded(nbytes: int, block: int) -> int:
    return -(-nbytes // block) * block if block else nbytes


# ------------------------------------------------------------------ fake process group (fsdp)


@contextlib.contextmanager
def fake_process_group(world_size: int) -> Iterator[Any]:
    """A process group of `world_size` fake ranks (this process is rank 0) and its 1-D mesh."""
    # FakeStore lives in torch's private testing package: loaded only for a multi-GPU estimate.
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise NotEstimable(
            "init_process_group",
            "a process group is already initialised in this process: run `pilot-tui estimate`, "
            "which estimates in a process of its own",
        )
    dist.init_process_group("fake", rank=0, world_size=world_size, store=FakeStore())
    try:
        # Built outside the fake mode: the mesh reads its rank list as real values.
        yield init_device_mesh("cpu", (world_size,))
    finally:
        dist.destroy_process_group()


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks FSDP wraps one by one: the children of the model's largest ModuleList."""
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) > 0]
    if not lists:
        return []
    return list(max(lists, key=lambda m: sum(p.numel() for p in m.parameters())))


# ------------------------------------------------------------------ the run


def _failed_op(exc: BaseException) -> str:
    """The operator a fake-tensor failure names ("" when it names none)."""
    func = getattr(exc, "func", None)
    if func is not None:
        return str(func)
    text = str(exc)
    for marker in ("aten.", "aten::", "torch.ops."):
        at = text.find(marker)
        if at >= 0:
            return text[at:].split()[0].strip("'\"(),:")
    return ""


def _snapshot(tracker: Any, device: torch.device) -> dict[str, int]:
    snap = tracker.get_tracker_snapshot("current").get(device, {})
    return {str(getattr(k, "name", k)): int(v) for k, v in snap.items()}


def _peak(tracker: Any, device: torch.device) -> dict[str, int]:
    snap = tracker.get_tracker_snapshot("peak").get(device, {})
    return {str(getattr(k, "name", k)): int(v) for k, v in snap.items()}


def _category(snap: Mapping[str, int], *names: str) -> int:
    return sum(int(snap.get(n, 0)) for n in names)


PARAMS = ("PARAM", "SHARDED_PARAM")
GRADS = ("GRAD", "SHARDED_GRAD")
ACTS = ("ACT",)
OPT = ("OPT",)
TOTAL = "Total"


def _host_step_bytes(optimizer: torch.optim.Optimizer, block: int) -> int:
    """Bytes of the scalar `step` counters (AdamW, Adafactor): on a GPU they stay in host memory,
    unless the optimizer is fused or capturable (then they live on the device)."""
    total = 0
    for group in optimizer.param_groups:
        if group.get("fused") or group.get("capturable"):
            continue
        for p in group["params"]:
            step = optimizer.state.get(p, {}).get("step")
            if isinstance(step, torch.Tensor) and step.dim() == 0:
                total += rounded(step.untyped_storage().nbytes(), block)
    return total


class _OwnGarbage:
    """Collects what one fake run left in reference cycles (its module tree, the tracker's hooks)
    and nothing older. A full `gc.collect()` walks the whole heap, ~0.25 s once transformers and TRL
    are loaded, per configuration; freezing the heap first (as steady's `FrozenHeap` does) leaves
    the collection only the objects made since. A heap someone else froze is left as it is."""

    def __init__(self) -> None:
        self.ours = not heap.frozen_by_someone()
        if self.ours:
            gc.freeze()

    def collect(self) -> None:
        gc.collect()
        if self.ours:
            gc.unfreeze()
            self.ours = False


def run_fake(source: ModelSource, cfg: FakeConfig) -> dict[str, Any]:
    """Estimate one configuration; a failure becomes a "not estimable" result naming the op."""
    t0 = time.perf_counter()
    heap = _OwnGarbage()
    try:
        try:
            out = _run(source, cfg)
        except _Unreached as exc:  # rare: once more, as a first update would leave them
            out = _run(source, cfg, reached=exc.reached)
    except NotEstimable as exc:
        out = {"estimable": False, "op": exc.op, "reason": exc.reason}
    except Exception as exc:  # an op without a fake kernel, a data-dependent branch, user code
        op = _failed_op(exc)
        where = f"fake tensors cannot follow {op}" if op else "the fake run failed"
        out = {
            "estimable": False,
            "op": op or type(exc).__name__,
            "reason": f"{where}: {exception_line(exc, 400)}"[:400],
        }
    finally:
        heap.collect()
    out["seconds"] = round(time.perf_counter() - t0, 3)
    return out


class _Unreached(Exception):
    """The measured backward left some trainable parameters without a gradient: `reached` are
    the indices (in `model.parameters()` order among the trainable) of those it reached."""

    def __init__(self, reached: frozenset[int]) -> None:
        super().__init__(f"{len(reached)} trainable parameters reached")
        self.reached = reached


def _run(source: ModelSource, cfg: FakeConfig, reached: frozenset[int] | None = None) -> dict[str, Any]:
    """One configuration's figures. `reached`: the trainable parameters the loss reaches, where
    a first run found some it does not (only those get a gradient of zeros, so only those get
    optimizer state, as in a run: a step skips a parameter without a gradient)."""
    if cfg.strategy not in STRATEGIES:
        raise NotEstimable("strategy", f"unknown strategy {cfg.strategy!r} (one of {', '.join(STRATEGIES)})")
    block = ALLOCATOR_BLOCK if cfg.allocator_rounding else 0
    device = torch.device("cpu")
    length = cfg.max_length
    train_real = source.batch(cfg.microbatch, length, True)
    eval_real = source.batch(cfg.eval_microbatch or cfg.microbatch, length, False)
    # Counted on the real batch: a fake tensor has no values to count.
    denom = max(1, objective.supervised_count(source.task, train_real) * cfg.accumulation)
    with contextlib.ExitStack() as stack:
        stack.enter_context(allocator_rounding(block))
        mesh = stack.enter_context(fake_process_group(cfg.gpus)) if cfg.strategy == "fsdp" else None
        fake = stack.enter_context(FakeTensorMode()) if cfg.fake else _RealMode()
        model = source.build()
        if cfg.activation_checkpointing:
            if source.set_checkpointing is None:
                raise NotEstimable("activation_checkpointing", "this task exposes no checkpointing switch")
            source.set_checkpointing(model, True)
        units = shard_units(model)
        if mesh is not None:
            # torch.distributed.fsdp takes seconds to import: only an FSDP estimate pays for it.
            from torch.distributed.fsdp import fully_shard

            for unit in units:
                fully_shard(unit, mesh=mesh)
            fully_shard(model, mesh=mesh)
        trainable = [p for p in model.parameters() if p.requires_grad]
        trainable_count = sum(p.numel() for p in trainable)  # a DTensor counts its global size
        # CUDA's default is foreach (one parameter-sized temporary in the step). Under FSDP the
        # fake DTensor propagation of foreach ops is counted as global-size tensors, so the
        # per-tensor path is simulated there (the docs say what that leaves out).
        optimizer = optimizers.build(
            cfg.optimizer, trainable, lr=1e-4, weight_decay=cfg.weight_decay, foreach=cfg.strategy != "fsdp"
        )
        train = {k: fake.from_tensor(v) for k, v in train_real.items()}
        # The first update only has to create the optimizer state: its step runs on gradients of
        # zeros, in place of a forward and backward that allocate nothing the next update does not
        # (it runs them with the state resident); what a step allocates does not depend on the
        # values. Made before the tracker, which counts each one as a gradient.
        for i, p in enumerate(trainable):
            if reached is None or i in reached:
                p.grad = torch.zeros_like(p)
        tracker = _tracker(cfg, model, optimizer)
        if mesh is None:
            tracker.track_external(*train.values())
        else:
            tracker.track_inputs(tuple(train.values()))
        figures: dict[str, int] = {}
        with tracker:
            _step(cfg, optimizer, trainable)  # the first update: the state created
            # The next update, with the state resident. Its one microbatch meets no gradients;
            # of several, the largest is any after the first, which meets the gradients already
            # there: the zeros stay for it (nothing in it allocates less than in the first).
            if cfg.accumulation < 2:
                optimizer.zero_grad(set_to_none=True)
            model.train()
            before = _snapshot(tracker, device)
            with autocast(device, cfg.precision):
                logits = objective.forward(source.task, model, train)
                part = objective.loss_sum(source.task, logits, train)
            # What the forward keeps for backward: the logits themselves go unless saved.
            del logits
            after = _snapshot(tracker, device)
            figures["activations"] = _category(after, *ACTS) - _category(before, *ACTS)
            got: set[int] = set()
            hooks = [
                p.register_post_accumulate_grad_hook(lambda _p, i=i: got.add(i))
                for i, p in enumerate(trainable)
            ]
            (part / denom).backward()
            del part
            for hook in hooks:
                hook.remove()
            # None noted at all: hooks this torch does not run (on sharded parameters, say);
            # every trainable parameter is then counted, the larger figure.
            if reached is None and got and len(got) < len(trainable):
                raise _Unreached(frozenset(got))
            figures["gradients"] = _category(_snapshot(tracker, device), *GRADS)
            _step(cfg, optimizer, trainable)
            steady = _snapshot(tracker, device)
            peak = _peak(tracker, device)
        host_steps = _host_step_bytes(optimizer, block)
        figures["parameters"] = _category(steady, *PARAMS)
        figures["buffers"] = _category(steady, "BUFFER")
        figures["optimizer_state"] = _category(steady, *OPT) - host_steps
        peak_total = int(peak.get(TOTAL, 0)) - host_steps
        # Kept in training (the runner zeroes gradients at the start of the next update).
        eval_peak, eval_acts = _eval_pass(cfg, model, optimizer, eval_real, source, fake, device, mesh)
        eval_peak -= host_steps
        del model, optimizer, train, tracker
    if cfg.strategy == "ddp":
        # DDP's reducer keeps its own bucket copy of the gradients for the whole run
        # (gradient_as_bucket_view=False, the default): one more gradient-sized block, always.
        figures["ddp_buckets"] = figures["gradients"]
        peak_total += figures["ddp_buckets"]
        eval_peak += figures["ddp_buckets"]
    static = figures["parameters"] + figures["buffers"] + figures["gradients"] + figures["optimizer_state"]
    static += figures.get("ddp_buckets", 0)
    figures["temporaries"] = max(0, peak_total - static - figures["activations"])
    result: dict[str, Any] = {
        "estimable": True,
        "peak_allocated_bytes": peak_total,
        "eval_peak_allocated_bytes": eval_peak,
        "eval_activations_bytes": eval_acts,
        "trainable_parameters": trainable_count,
        "sequence_length": int(train_real[_first_2d(train_real)].shape[-1]) if _first_2d(train_real) else 0,
        "shard_units": len(units),
        "peak_breakdown": {k: v for k, v in peak.items() if v and k != TOTAL},
    }
    result |= {f"{k}_bytes": v for k, v in figures.items()}
    return result


def _step(cfg: FakeConfig, optimizer: torch.optim.Optimizer, trainable: list[nn.Parameter]) -> None:
    """The runner's step: the gradients clipped as configured, then the optimizer's step."""
    if cfg.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(trainable, cfg.grad_clip)
    with _step_scalars() if cfg.fake else contextlib.nullcontext():
        optimizer.step()


@contextlib.contextmanager
def _step_scalars() -> Iterator[None]:
    """Inside a fake optimizer step, a tensor read as a Python number reads 1.

    Adafactor reads its step count and two norms per parameter with `.item()`; a fake tensor has
    no value to give. Those numbers only scale the update: what the step allocates (its state,
    its temporaries) does not depend on them, so the step's memory is counted exactly.
    """

    class StepScalars(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func is torch.ops.aten._local_scalar_dense.default:
                t = args[0]
                return True if t.dtype is torch.bool else (1.0 if t.is_floating_point() else 1)
            return func(*args, **(kwargs or {}))

    with StepScalars():
        yield


class _RealMode:
    """Stands for the fake mode in a real run: tensors are used as they are."""

    @staticmethod
    def from_tensor(t: torch.Tensor) -> torch.Tensor:
        return t


def _first_2d(batch: Mapping[str, torch.Tensor]) -> str:
    return next((k for k, v in batch.items() if v.dim() == 2), "")


def _tracker(cfg: FakeConfig, model: nn.Module, optimizer: torch.optim.Optimizer) -> Any:
    if cfg.strategy == "fsdp":
        # The trackers are in torch.distributed._tools (over a second to import): estimates only.
        from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

        return _global_peak_only(FSDPMemTracker)(mod=model, optm=optimizer)
    from torch.distributed._tools.mem_tracker import MemTracker  # see above

    tracker = _global_peak_only(MemTracker)()
    # The tracker hooks every parameter's gradient, and torch refuses a hook on a frozen one
    # (LoRA's base weights): mark those as hooked already. They never get a gradient.
    handles = getattr(tracker, "_param_to_grad_hook_handles", None)
    if handles is not None:
        for p in model.parameters():
            if not p.requires_grad:
                handles[p] = (_NoHook(), _NoHook())
    tracker.track_external(model, optimizer)
    return tracker


def _global_peak_only(tracker_cls: type) -> type:
    """`tracker_cls` keeping, after each op, only the peak the estimate reads: the whole device's.

    The stock tracker also updates the local peak of every module it has seen, after every op:
    O(modules) per op, a quarter of a 2-layer Llama's fake run and far more on a deep model
    (measured with py-spy on TRL's `sft.py`). Those per-module peaks are never read here. A
    torch whose tracker keeps its current snapshot under other names gets its own update."""

    class GlobalPeakTracker(tracker_cls):  # type: ignore[valid-type, misc]
        def _update_peak_stats(self, peak_state: Any) -> None:
            current = getattr(self, "_curr_mem_snap", None)
            peaks = getattr(self, "_peak_mem", None)
            snaps = getattr(self, "_peak_mem_snap", None)
            if current is None or peaks is None or snaps is None:
                super()._update_peak_stats(peak_state)
                return
            for dev, dev_snap in current.items():
                total = dev_snap.get(TOTAL)
                if total is None:  # another layout of the snapshot: the tracker's own update
                    super()._update_peak_stats(peak_state)
                    return
                if peaks.get(dev, 0) < total:
                    peaks[dev] = total
                    snaps[dev] = dict(dev_snap)  # category -> bytes: a copy of the flat dict

    GlobalPeakTracker.__name__ = f"GlobalPeak{tracker_cls.__name__}"
    return GlobalPeakTracker


class _NoHook:
    """Stands for a hook handle that was never registered."""

    def remove(self) -> None:
        pass


def _eval_pass(
    cfg: FakeConfig,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    real: dict[str, torch.Tensor],
    source: ModelSource,
    fake: Any,
    device: torch.device,
    mesh: Any,
) -> tuple[int, int]:
    """The evaluation forward on the longest sequences, with the training state resident."""
    batch = {k: fake.from_tensor(v) for k, v in real.items()}
    tracker = _tracker(cfg, model, optimizer)
    if mesh is None:
        tracker.track_external(model, optimizer, *batch.values())
    else:
        tracker.track_inputs(tuple(batch.values()))
    model.eval()
    with tracker, torch.no_grad():
        before = _category(_snapshot(tracker, device), TOTAL)
        with autocast(device, cfg.precision):
            logits = objective.forward(source.task, model, batch)
            objective.loss_sum(source.task, logits, batch)
        del logits
        peak = int(_peak(tracker, device).get(TOTAL, 0))
    return peak, max(0, peak - before)
