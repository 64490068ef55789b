"""Memory variants side by side, out-of-memory as a result and the fit search, through the real
runner (on a thread here: the phases are what is tested) and the TOML record read back (R10,
R11, R12)."""

from __future__ import annotations

import builtins
import gc
import textwrap
import tomllib
import weakref
from collections.abc import Mapping
from pathlib import Path

import pytest
import tomli_w
import torch

from pilot_tui.core.events import RecordUpdate
from pilot_tui.core.spec import load_spec
from pilot_tui.core.steps import Step
from pilot_tui.runner.context import RunContext
from pilot_tui.runner.in_process import InProcessLink
from pilot_tui.runner.memory import heap
from pilot_tui.runner.phases import base as phase_base
from pilot_tui.runner.phases import execute
from pilot_tui.runner.phases.variants_compare import compare_targets
from pilot_tui.session.driver import Session
from pilot_tui.tasks.loader import load_task

# Engine and closing phases the variant checks do not need (each one costs seconds).
SKIP = [
    "stack",
    "estimate",
    "machine",
    "inspect",
    "split",
    "overfit",
    "save",
    "export",
    "lr_run",
    "resume",
    "final",
]


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch: pytest.MonkeyPatch):
    # The runner inherits it: a tiny model is overhead-bound, and two intra-op threads on a shared
    # two-core CI machine only fight the other test processes. Nothing measured depends on it.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same for the checks that run in this process
    yield
    torch.set_num_threads(threads)


def _run(path: Path, records: Path) -> dict:
    session = Session(path, records, link=InProcessLink())
    session.start()
    try:
        for step in session.steps:
            for _ in session.run_step(step.key):
                pass
    finally:
        session.close()
    assert session.record is not None
    return tomllib.loads(session.record.path.read_text())


def _live_storages() -> dict[int, int]:
    """Bytes of every tensor storage alive in this process, however it is held, by address."""
    gc.collect()
    storages = {}
    for o in gc.get_objects():
        if not issubclass(type(o), torch.Tensor):  # type(): no deprecated proxy warns
            continue
        try:  # what other tests of this process left (fake, sparse, nested tensors) has no storage
            if o.is_meta:
                continue
            storage = o.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
        except (RuntimeError, NotImplementedError, TypeError):
            continue
    return storages


def _live_tensor_mb(before: Mapping[int, int]) -> float:
    """MiB of the tensor storages alive now that were not alive at `before`: what earlier tests
    of this worker process left, freed meanwhile or not, is not counted."""
    return sum(n for ptr, n in _live_storages().items() if before.get(ptr) != n) / 2**20


def test_a_variant_held_in_a_reference_cycle_is_freed_under_the_runners_frozen_heap(
    write_campaign, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The runner freezes the heap its open built (runner/memory/heap.py), so full collections
    # walk only what the phases made. A variant's state is made by its phases: when its entry is
    # done and the state dropped, it is collected even where a reference cycle holds it (hooks
    # and closures make them), and the next variant does not start on it.
    path = write_campaign(
        {"phases": {"skip": SKIP, "steady_updates": 2}, "limits": {"default": {"time_s": 0}}}
    )
    watched: dict[str, weakref.ref] = {}
    alive_at_start: dict[str, list[str]] = {}

    def plant_and_watch(ctx: RunContext, step: Step) -> None:
        if step.phase == "first_step":
            alive_at_start[step.variant] = [v for v, ref in watched.items() if ref() is not None]
        if step.phase == "steady" and step.variant != "control":
            model = ctx.states[step.variant].model
            model.planted_cycle = [model]
            watched[step.variant] = weakref.ref(next(model.parameters()))

    monkeypatch.setattr(phase_base, "BEFORE_STEP", [*phase_base.BEFORE_STEP, plant_and_watch])
    session = Session(path, tmp_path / "records", link=InProcessLink(keep_heap=True))
    try:
        session.start()
        assert gc.get_freeze_count() > 0  # what the open built is out of the collector's walks
        for step in session.steps:
            for _ in session.run_step(step.key):
                pass
    finally:
        session.close()
        heap.hand_back()
    assert sorted(watched) == ["ckpt", "len16", "mb1"]
    assert alive_at_start == {"control": [], "mb1": [], "ckpt": [], "len16": []}


GARBAGE_TASK = """
import builtins
import weakref

import torch

from pilot_tui.tasks import demo_instruct


def make_task(**options):
    # A user's task build leaving a tensor in a reference cycle (a cache that refers to itself).
    cycle = {"tensor": torch.zeros(1 << 16)}
    cycle["self"] = cycle
    builtins.pilot_open_garbage = weakref.ref(cycle["tensor"])
    return demo_instruct.make_task(**options)
"""


def test_what_the_open_left_in_reference_cycles_is_collected_before_its_heap_is_frozen(
    write_campaign, tmp_path: Path
) -> None:
    # The runner freezes the libraries as soon as they are imported, then collects what the
    # task's build (or the script's capture) left, then freezes the rest: garbage the build
    # left in a cycle must not be frozen with it (it would never be freed). Automatic
    # collections are off here, so only the open's own collection can free it.
    (tmp_path / "garbage_task.py").write_text(GARBAGE_TASK)
    path = write_campaign({"task": {"builtin": "", "file": "garbage_task.py"}})
    session = Session(path, tmp_path / "records", link=InProcessLink(keep_heap=True))
    gc.disable()
    try:
        session.start()
        assert builtins.pilot_open_garbage() is None  # type: ignore[attr-defined]
    finally:
        session.close()
        gc.enable()
        heap.hand_back()
        del builtins.pilot_open_garbage  # type: ignore[attr-defined]


def test_demo_variants_side_by_side(write_campaign, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_campaign(
        {"phases": {"skip": SKIP, "steady_updates": 2}, "limits": {"default": {"time_s": 0}}}
    )
    # What each configuration starts on: every variant after the control must find only what the
    # control keeps (its weights, gradients, optimizer state), not what earlier variants left.
    started_on: dict[str, float] = {}
    before = _live_storages()

    def measure(ctx: RunContext, step: Step) -> None:
        if step.phase == "first_step":
            started_on[step.variant] = _live_tensor_mb(before)

    monkeypatch.setattr(phase_base, "BEFORE_STEP", [*phase_base.BEFORE_STEP, measure])
    record = _run(path, tmp_path / "records")
    later = [started_on[v] for v in ("mb1", "ckpt", "len16")]
    assert max(later) - min(later) < 0.01, started_on
    # MFU needs a dense peak: on a CPU the row says there is none, and gives no figure.
    steady_row = next(r for r in record["phases"] if r["step"] == "steady")
    assert steady_row["details"]["mfu"]["why"] == "a CPU: no dense peak to compare with"
    assert steady_row["details"]["mfu"]["model_tflops"] > 0
    entries = {e["id"]: e for e in record["variants"]}
    assert list(entries) == ["control", "mb1", "ckpt", "len16"]
    control, mb1, ckpt, len16 = (entries[k] for k in ("control", "mb1", "ckpt", "len16"))
    rows = {r["step"]: r for r in record["phases"]}
    for e in entries.values():
        assert e["verdict"] != "fail", e["reason"]  # steady may warn: 2 updates at lr 1e-4
        # Peak RSS is the max over the variant's three rows, and the breakdown is complete.
        steps = [
            f"{p}@{e['id']}" if e["id"] != "control" else p for p in ("first_step", "steady", "eval_longest")
        ]
        assert e["peak_rss_mb"] == max(rows[s]["memory"]["peak_rss_mb"] for s in steps)
        assert e["step_time_s"] == rows[steps[1]]["details"]["step_time_s"]
        for key in ("weights_mb", "gradients_mb", "optimizer_state_mb", "static_mb", "saved_activations_mb"):
            assert e[key] > 0, key
        assert "torch library" in e["memory_note"]
    # The control is the reference: no ratio to itself.
    assert control["is_control"] and not [k for k in control if k.endswith("_ratio")]
    # Microbatch 1 keeps the effective batch through accumulation and says so.
    assert (mb1["microbatch"], mb1["accumulation"], mb1["effective_batch"]) == (
        1,
        4,
        control["effective_batch"],
    )
    assert any("keeps the effective batch" in n for n in mb1["notes"])
    # Accumulation frees neither weights nor optimizer state: static memory is identical.
    for e in (mb1, ckpt, len16):
        assert e["static_mb"] == control["static_mb"] and e["static_ratio"] == 1.0
        assert e["peak_rss_ratio"] == round(e["peak_rss_mb"] / control["peak_rss_mb"], 4)
        assert e["step_time_ratio"] == round(e["step_time_s"] / control["step_time_s"], 4)
    # Activations (tensors saved for backward) do shrink with a smaller microbatch or checkpointing.
    assert mb1["saved_activations_mb"] < control["saved_activations_mb"]
    assert ckpt["saved_activations_mb"] < control["saved_activations_mb"]
    # Same question? Only the truncating variant changes it.
    assert not mb1["changes_question"] and not ckpt["changes_question"]
    train = record["dataset"]["splits"]["train"]
    assert len16["changes_question"] is True
    assert 0 < len16["targets_changed"] <= train
    assert len16["targets_changed_share"] == round(len16["targets_changed"] / train, 4)
    assert len16["supervised_tokens_lost"] > 0


def test_compare_targets_counts_changed_examples() -> None:
    control = [((1, 5), (2, 6)), ((1, 7),), ()]
    variant = [((1, 5),), ((1, 7),), ()]
    assert compare_targets(control, variant) == (1, 1, 3)


# A task whose model raises the real out-of-memory exception past a token budget. On CPU there is
# no device memory to exhaust: this is the stand-in for the hardware boundary a CUDA allocator
# reports with the same exception class, so the runner's path is the one a GPU would take.
OOM_TASK = textwrap.dedent(
    """
    import torch
    from pilot_tui.tasks.contract import CAUSAL_LM, Task
    from pilot_tui.tasks.demo_instruct import VOCAB, make_collate, set_checkpointing
    from pilot_tui.tasks.tiny_gpt import TinyGPT

    BUDGET = 48  # tokens per forward (batch x sequence) this "device" holds

    class Bounded(TinyGPT):
        def forward(self, input_ids, attention_mask=None):
            if input_ids.numel() > BUDGET:
                raise torch.OutOfMemoryError(
                    f"stand-in: {tuple(input_ids.shape)} is over {BUDGET} tokens"
                )
            return super().forward(input_ids, attention_mask)

    def make_task(**_):  # the fast demo's options are not for this task
        examples = []
        for i in range(48):  # short training examples: at most 10 tokens
            examples.append({"id": f"t{i}", "g": f"t{i}", "split": "train",
                             "prompt": "ab"[: 1 + i % 2], "response": "cdef"[: 1 + i % 4]})
        for i in range(6):  # validation holds a few long ones (33 tokens)
            long = i < 3
            examples.append({"id": f"v{i}", "g": f"v{i}", "split": "validation",
                             "prompt": ("x" * 20) if long else "ab", "response": ("y" * 10) if long else "c"})
        return Task(name="bounded", kind=CAUSAL_LM, examples=examples,
                    build_model=lambda: Bounded(VOCAB, d_model=16, n_layers=1, n_heads=2),
                    collate=make_collate(), group_key="g", set_activation_checkpointing=set_checkpointing,
                    default_max_length=16)
    """
)


@pytest.fixture
def bounded_campaign(write_campaign, tmp_path: Path):
    (tmp_path / "bounded_task.py").write_text(OOM_TASK)

    def write(changes: dict) -> Path:
        base = {
            "task": {"file": "bounded_task.py", "options": {}, "group_key": "g"},
            "split": {"field": "split", "train": 0.8, "validation": 0.1, "test": 0.1},
            "batch": {"microbatch": 2, "accumulation": 2, "max_length": 16, "updates": 10},
            "phases": {"skip": SKIP, "steady_updates": 2},
            # A rate at which 3 updates (a warm-up and 2 timed) of this tiny model lower the loss.
            "optim": {"lr": 1e-2, "warmup_updates": 0},
            "limits": {"default": {"time_s": 0}},
            "variants": [
                {"id": "long", "max_length": 32},  # eval on 2 x 32 tokens: over the budget
                {"id": "ckpt", "activation_checkpointing": True},
            ],
        }
        path = write_campaign(base | changes, name="bounded.toml")
        raw = tomllib.loads(path.read_text())
        raw["task"].pop("builtin")  # the demo's built-in task is replaced by the file
        path.write_text(tomli_w.dumps(raw))
        return path

    return write


def test_oom_in_eval_longest_is_a_result_and_the_next_variant_runs(bounded_campaign, tmp_path: Path) -> None:
    path = bounded_campaign({"fit_search": {"microbatches": [1, 2, 4, 8], "max_lengths": [16, 32]}})
    record = _run(path, tmp_path / "records")
    rows = {r["step"]: r for r in record["phases"]}
    assert [rows[s]["verdict"] for s in ("first_step", "steady", "eval_longest")] == ["pass"] * 3
    # The long variant trains (short examples) but its longest-sequence eval runs out of memory.
    assert rows["first_step@long"]["verdict"] == "pass"
    failed = rows["eval_longest@long"]
    assert failed["verdict"] == "fail"
    assert "out of memory" in failed["reason"] and "in eval_longest on input" in failed["reason"]
    assert failed["details"]["input"] == {"microbatch": 2, "max_length": 32, "shape": [2, 32]}
    assert "runner_num_ooms" in failed["details"]  # lifetime; the per-phase count is memory.num_ooms
    # The runner survived: the next variant runs and passes all three phases.
    assert [rows[f"{p}@ckpt"]["verdict"] for p in ("first_step", "steady", "eval_longest")] == ["pass"] * 3
    entries = {e["id"]: e for e in record["variants"]}
    assert entries["long"]["verdict"] == "fail" and entries["long"]["eval_longest_verdict"] == "fail"
    assert "out of memory" in entries["long"]["reason"]
    # Longer than the control cuts nothing the control kept (training examples are short).
    assert entries["long"]["changes_question"] is False
    assert entries["ckpt"]["verdict"] == "pass"

    # Largest that fits, every point kept: budget 48 tokens, eval on the longest sequences.
    fit = record["fit"]
    status = {(p["microbatch"], p["max_length"]): p["status"] for p in fit["points"]}
    assert status == {
        (1, 16): "fits",
        (2, 16): "fits",
        (4, 16): "oom",  # eval 4 x 16 = 64 tokens
        (1, 32): "fits",
        (2, 32): "oom",  # eval 2 x 32 = 64 tokens; larger ones are not tried
    }
    oom = next(p for p in fit["points"] if p["status"] == "oom")
    assert oom["failed_in"] == "eval_longest" and oom["input"]["shape"] == [4, 16]
    # The declared max length (16) is preferred: it keeps the question.
    assert (fit["largest_microbatch"], fit["max_length"], fit["accumulation"]) == (2, 16, 2)
    assert fit["effective_batch"] == fit["declared_effective_batch"] == 4
    for p in fit["points"]:
        if p["status"] == "fits":
            assert p["train_peak_mb"] > 0 and p["eval_peak_mb"] > 0 and p["step_time_s"] > 0
    assert rows["fit_search"]["verdict"] == "pass"


def test_fit_search_over_the_declared_ceiling_on_cpu(bounded_campaign) -> None:
    """On CPU the limit is the declared ceiling: 1 MiB is below any process, so nothing fits."""
    path = bounded_campaign({"fit_search": {"microbatches": [1, 2], "memory_mb": 1}, "variants": []})
    loaded = load_spec(path)
    events: list = []
    ctx = RunContext(loaded, load_task(loaded), torch.device("cpu"), events.append, path.parent / "work")
    row = execute(ctx, Step("fit_search", "fit_search"), {})
    assert row["verdict"] == "fail" and row["reason"].startswith("nothing fits")
    (fit,) = [e.value for e in events if isinstance(e, RecordUpdate) and e.section == "fit"]
    assert [p["status"] for p in fit["points"]] == ["over_ceiling"]  # stops at the first failure
    assert fit["points"][0]["failed_in"] == "first_step" and fit["found"] is False


def test_fp16_first_step_is_a_real_step_after_scaler_skips(write_campaign) -> None:
    """An overflow at the scaler's initial scale skips the step by design; the first_step phase
    repeats until a real step allocated the optimizer state, instead of failing on inf norms."""
    path = write_campaign({"phases": {"skip": SKIP}, "variants": [{"id": "half", "precision": "fp16"}]})
    loaded = load_spec(path)
    ctx = RunContext(loaded, load_task(loaded), torch.device("cpu"), [].append, path.parent / "work")
    state = ctx.state("half", ctx.config("half"))
    # 2**24 overflows fp16 gradients of this model for sure (fp16 tops out at 65504).
    state.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**24)
    row = execute(ctx, Step("first_step@half", "first_step", "half"), {})
    assert row["verdict"] == "pass", row["reason"]
    details = row["details"]
    assert details["scaler_skipped_updates"] >= 1
    assert details["grad_scale"] == 2.0**24 * 0.5 ** details["scaler_skipped_updates"]
    assert details["optimizer_state_mb"] > 0
