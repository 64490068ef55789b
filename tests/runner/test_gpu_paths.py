"""What the CUDA path must do, shown on the CPU where it can be.

- A sticky CUDA error (simulated: tests/data/gpu/sticky_task.py) fails its step's row, ends that
  runner, and the next step runs in a new one; the headless CLI exits 1, never 0.
- A fit search parks every other training state, the control's included.
- Under autocast, the low-precision weight copies autograd saves are not counted as activations.
- The environment records what changes GPU time and memory.

Everything is real: torch on CPU, a real runner process, the record read back with tomllib.
"""

from __future__ import annotations

import io
import tomllib
from pathlib import Path
from typing import Any

import tomli_w
import torch
from conftest import FAST, REPO, deep_merge, demo_raw

from pilot_tui.commands.headless import run_headless
from pilot_tui.core.phase_table import names as phase_names
from pilot_tui.runner.memory.oom import is_oom
from pilot_tui.runner.processes.determinism import nondeterministic_op
from pilot_tui.session.driver import Session

STICKY_TASK = REPO / "tests" / "data" / "gpu" / "sticky_task.py"


def campaign(folder: Path, changes: dict[str, Any], keep: tuple[str, ...]) -> Path:
    """The fast demo running only the phases in `keep` (plus whatever `changes` add)."""
    raw = deep_merge(demo_raw(), FAST)
    skip = [p for p in phase_names() if p not in keep]
    raw = deep_merge(raw, {"phases": {"skip": skip}})
    raw = deep_merge(raw, changes)
    for section in ("variants", "lr_board"):
        raw.pop(section, None)
    path = folder / "campaign.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


def record_rows(records: Path) -> dict[str, dict[str, Any]]:
    (record,) = records.glob("*.toml")
    data = tomllib.loads(record.read_text(encoding="utf-8"))
    return {r["step"]: r for r in data["phases"]} | {"_environment": data["environment"]}


def test_a_sticky_cuda_error_fails_its_row_ends_the_runner_and_exits_1(tmp_path):
    marker = tmp_path / "poisoned-by-pid"
    options = {**FAST["task"]["options"], "marker": str(marker)}
    raw_task = {"task": {"file": str(STICKY_TASK), "function": "make_task", "options": options}}
    spec = campaign(tmp_path, raw_task, keep=("load", "first_step", "steady"))
    # The campaign names a task file: drop the built-in it inherits from the demo.
    raw = tomllib.loads(spec.read_text())
    raw["task"].pop("builtin")
    spec.write_text(tomli_w.dumps(raw))
    out = io.StringIO()
    code = run_headless(Session(spec, tmp_path / "records"), out=out, err=io.StringIO())
    text = out.getvalue()
    assert code == 1, text
    assert "PASS" not in text and "FAIL: 1 failed gate(s)" in text, text
    rows = record_rows(tmp_path / "records")
    first = rows["first_step"]
    assert first["verdict"] == "fail"
    assert first["reason"].startswith("CUDA context poisoned: RuntimeError: CUDA error: device-side assert")
    assert first["details"]["poisoned"] is True
    assert "device-side assert" in first["details"]["body_error"]  # the body's own failure is kept
    # The poisoned runner's synchronize raises for good: the step after it ran, and passed, only
    # because it ran in a new runner process (the marker holds the first runner's pid).
    assert marker.read_text().isdigit()
    assert rows["steady"]["verdict"] in ("pass", "warn"), rows["steady"]["reason"]


def test_a_step_without_a_row_fails_the_run_and_a_fit_search_parks_the_control(tmp_path):
    """Two behaviours in one runner start (test cost): the headless count, the fit search's parking."""
    spec = campaign(
        tmp_path,
        {"fit_search": {"microbatches": [2]}},
        keep=("load", "first_step", "fit_search"),
    )
    session = Session(spec, tmp_path / "records")
    run_step = session.run_step

    def load_without_a_row(key, overrides=None):
        # A real row-less step: the runner cannot build the step's configuration (a microbatch
        # that is not a number), reports a runner error and goes idle without a row.
        return run_step(key, {"microbatch": "not a number"} if key == "load" else overrides)

    session.run_step = load_without_a_row
    out, err = io.StringIO(), io.StringIO()
    code = run_headless(session, out=out, err=err)
    assert code == 1, out.getvalue()
    assert "load: ended without a row" in out.getvalue()
    assert "runner error" in err.getvalue()
    assert "FAIL: 1 failed gate(s)" in out.getvalue()

    rows = record_rows(tmp_path / "records")
    assert [k for k in rows if not k.startswith("_")] == ["first_step", "fit_search"]
    fit = rows["fit_search"]
    assert fit["verdict"] in ("pass", "warn"), fit["reason"]
    # The control's weights, gradients and AdamW state were built by first_step: the search
    # measured its points without them (on CUDA they are moved to host memory).
    assert fit["details"]["parked_states"] == ["control"]


def test_an_activation_count_leaves_out_autocast_weight_copies(tmp_path):
    from pilot_tui.core.spec import load_spec
    from pilot_tui.runner.context import RunContext
    from pilot_tui.runner.phases.variants_compare import saved_tensors
    from pilot_tui.tasks.loader import load_task

    loaded = load_spec(campaign(tmp_path, {}, keep=()))
    ctx = RunContext(loaded, load_task(loaded), torch.device("cpu"), lambda _msg: None, tmp_path)
    saved = {}
    for precision in ("fp32", "bf16"):
        state = ctx.new_state(ctx.with_config("control", precision=precision))
        saved[precision] = saved_tensors(ctx, state)
    linear = sum(m.weight.numel() for m in state.model.modules() if isinstance(m, torch.nn.Linear))
    assert saved["fp32"]["weight_casts"] == 0
    # Autocast casts each Linear weight to bf16 (2 B per element) and autograd saves that copy:
    # exactly those bytes are set apart, and what is left is smaller than in fp32.
    assert saved["bf16"]["weight_casts"] == 2 * linear
    assert 0 < saved["bf16"]["activations"] < saved["fp32"]["activations"]


def test_environment_records_what_changes_gpu_time_and_memory():
    from pilot_tui.runner.environment import ENV_VARS, describe

    env = describe(torch.device("cpu"))
    for key in (
        "tf32_matmul",
        "tf32_cudnn",
        "float32_matmul_precision",
        "cudnn_benchmark",
        "cudnn_deterministic",
        "deterministic_algorithms",
    ):
        assert key in env, key
    assert env["tf32_matmul"] == torch.backends.cuda.matmul.allow_tf32
    assert set(ENV_VARS) <= set(env["env_vars"])
    assert "CUDA_VISIBLE_DEVICES" in env["env_vars"] and "PYTORCH_CUDA_ALLOC_CONF" in env["env_vars"]


def test_library_workspace_failures_are_out_of_memory_results():
    assert is_oom(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"))
    assert is_oom(RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"))
    assert is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not is_oom(RuntimeError("CUDA error: device-side assert triggered"))
    assert not is_oom(ValueError("shape mismatch"))


def test_determinism_warnings_name_the_kernel():
    msg = (
        "index_add_cuda_ does not have a deterministic implementation, but you set "
        "'torch.use_deterministic_algorithms(True, warn_only=True)'."
    )
    assert nondeterministic_op(msg) == "index_add_cuda_"
    assert nondeterministic_op("some other warning") is None


def test_resume_tolerance_is_relative_per_tensor_and_names_its_reason():
    from pilot_tui.runner.loop.resume_check import compare
    from pilot_tui.runner.subject.task.resume import comparison_tolerance

    def tensors(moment: float, weight: float) -> dict[str, torch.Tensor]:
        return {
            "model/w": torch.full((4,), weight, dtype=torch.float32),
            "optim/0/exp_avg_sq": torch.full((4,), moment, dtype=torch.float32),
            "draw/torch": torch.zeros(4),
        }

    steps = [{"step": 1, "lr": 1e-3, "batch": [1, 2], "loss": 2.0, "epoch": 0}]
    ref = tensors(1e-10, 0.5)
    # A moment off by 1e-4 of itself passes at 1e-3 relative, though |Δ| (1e-14) is nothing.
    assert compare(steps, steps, ref, tensors(1.0001e-10, 0.5), 0.1, 0.1, 1e-3).ok
    # Off by 1 % of itself it fails, and says which tensor and by how much, relatively.
    off = compare(steps, steps, ref, tensors(1.01e-10, 0.5), 0.1, 0.1, 1e-3)
    assert not off.ok and "exp_avg_sq" in off.reason() and "relative" in off.reason()
    assert not compare(steps, steps, ref, tensors(1.0001e-10, 0.5), 0.1, 0.1, 0.0).ok  # bitwise
    assert comparison_tolerance(True, 1e-3, ["index_add_cuda_"]) == (0.0, "bitwise")  # CPU
    tol, why = comparison_tolerance(False, 0.0, ["index_add_cuda_"])
    assert tol == 1e-3 and "index_add_cuda_" in why
    assert comparison_tolerance(False, 0.0, [])[0] == 0.0
