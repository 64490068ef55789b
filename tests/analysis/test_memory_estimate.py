"""The estimate's arithmetic (pure): need per GPU, fits / does not fit, the smallest rental, and the
plan's view of estimate beside measurement (R23)."""

from __future__ import annotations

from typing import Any

import pytest

from pilot_tui.analysis import memory_estimate as est

GIB = 1024**3


def seven_b(strategy: str = "none", gpus: int = 1) -> dict[str, Any]:
    """Components of a 7B-parameter fp32-master AdamW configuration (as the fake run reports them)."""
    n = 6.74e9
    return {
        "name": "control",
        "estimable": True,
        "strategy": strategy,
        "gpus": gpus,
        "shard_units": 32,
        "parameters_bytes": 4 * n,
        "buffers_bytes": 0,
        "gradients_bytes": 4 * n,
        "optimizer_state_bytes": 8 * n,
        "activations_bytes": 27 * GIB,
        "temporaries_bytes": 0,
        "peak_allocated_bytes": 16 * n + 27 * GIB,
        "eval_peak_allocated_bytes": 16 * n,
    }


def test_need_adds_the_stated_allowances_and_headroom() -> None:
    need = est.need_mib(10 * GIB, headroom=0.15)
    assert need == 10 * 1024 * (1 + est.ALLOCATOR_SHARE) * 1.15 + est.CUDA_CONTEXT_MIB
    assert est.smallest_gpu(need) == 24
    assert est.smallest_gpu(est.gpu_mib(80) + 1) == 141
    assert est.smallest_gpu(est.gpu_mib(141) + 1) is None


def test_a_7b_full_fine_tune_does_not_fit_one_80_gb_gpu_and_fsdp_is_the_way_out() -> None:
    entry = seven_b()
    v = est.verdict(entry, 0.15, gpu_memory_gb=80)
    assert v["status"] == "does not fit" and v["fits"] is False
    assert v["need_mib"] > 100 * 1024
    best = est.smallest_configuration(entry, 0.15)
    assert best is not None and best["strategy"] == "fsdp" and best["gpus"] > 1
    # The cheapest in GPU memory overall: nothing cheaper in the candidate list fits.
    assert best == est.candidates(entry, 0.15)[0]
    assert (
        est.extrapolate(entry, "fsdp", 8)
        < est.extrapolate(entry, "fsdp", 2)
        < est.extrapolate(entry, "none", 1)
    )
    assert est.extrapolate(entry, "ddp", 8) > est.extrapolate(entry, "none", 1)  # DDP's buckets
    rec = est.recommendation([entry | {"verdict": v}], 0.15)
    assert rec is not None and rec["gpus"] == best["gpus"] and "extrapolated" in rec["basis"]


def test_the_printed_configuration_names_an_optimizer_other_than_adamw() -> None:
    entry = seven_b() | {"microbatch": 1, "max_length": 2048, "precision": "bf16"}
    assert est.describe(entry) == "none×1 mb 1 len 2048 bf16"  # AdamW, or a record from before
    assert est.describe(entry | {"optimizer": "adamw"}) == "none×1 mb 1 len 2048 bf16"
    assert est.describe(entry | {"optimizer": "adafactor"}) == "none×1 mb 1 len 2048 bf16 adafactor"


def test_not_estimable_is_never_a_zero() -> None:
    entry = {"name": "control", "estimable": False, "op": "aten.nonzero.default", "reason": "no fake kernel"}
    v = est.verdict(entry, 0.15, 80)
    assert v["fits"] is None and v["status"] == "not estimable"
    assert "aten.nonzero.default" in est.line(entry | {"verdict": v})
    assert est.entry_need(entry, 0.15) is None


def _record(cuda: bool) -> dict[str, Any]:
    memory = {"peak_allocated_mb": 110.0, "peak_reserved_mb": 128.0} if cuda else {"peak_rss_mb": 400.0}
    rows = [
        {"step": step, "name": step, "variant": "control", "verdict": "pass", "memory": dict(memory)}
        for step in ("first_step", "steady", "eval_longest")
    ]
    rows[0]["details"] = {"input_shapes": [[2, 18], [2, 16]]}  # first_step: the sampler's batches
    rows[2]["details"] = {"input_shape": [2, 28]}  # eval_longest: as long as the max length
    config = {
        "name": "control",
        "max_length": 28,
        "estimable": True,
        "peak_allocated_mb": 100.0,
        "eval_peak_allocated_mb": 80.0,
        "need_mib": 1200.0,
        "status": "fits",
        "smallest_gpu_gb": 24,
    }
    return {
        "phases": rows,
        "estimate": {
            "label": est.ESTIMATE_LABEL,
            "target": {"strategy": "none", "gpus": 1, "headroom": 0.15},
            "allowance": est.ALLOWANCE_NOTE,
            "configurations": [config, {"name": "mb1", "estimable": False, "op": "aten.x", "reason": "r"}],
            "recommendation": {
                "gpus": 1,
                "gpu_memory_gb": 24,
                "strategy": "none",
                "need_mib": 1200.0,
                "basis": "estimated",
            },
        },
    }


def test_plan_on_cuda_shows_estimate_vs_measured_peak_allocated_with_the_ratio() -> None:
    view = est.plan_view(_record(cuda=True))
    assert view is not None and view["device"] == "cuda"
    control, mb1 = view["configurations"]
    assert control["measured_train_mb"] == 110.0 and control["train_ratio"] == 1.1
    assert control["eval_ratio"] == round(110.0 / 80.0, 3)
    # The training batches were shorter than the max length the estimate assumed: said, not hidden.
    assert control["width_note"] == "measured train on 18 tokens; estimated on 28"
    assert (control["train_same_length"], control["eval_same_length"]) == (False, True)
    assert "not estimable (aten.x)" in mb1["reason"]
    assert view["recommendation"]["calibration_ratio"] == 1.1
    text = "\n".join(est.plan_view_lines(view))
    assert "measured/estimate 1.10" in text and "calibrated" in text


def test_plan_on_cpu_labels_the_estimate_beside_the_rss() -> None:
    view = est.plan_view(_record(cuda=False))
    assert view is not None and view["device"] == "cpu"
    (control, _) = view["configurations"]
    assert control["measured_train_mb"] == 400.0 and "train_ratio" not in control
    text = "\n".join(est.plan_view_lines(view))
    assert est.ESTIMATE_LABEL in text and "not a GPU figure" in text
    assert "calibrated" not in text
    assert est.plan_view({"phases": []}) is None


def test_the_plan_carries_the_estimate_view_only_when_the_record_has_one() -> None:
    assert est.plan_view({"phases": []}) is None
    view = est.plan_view(_record(cuda=True))
    assert view is not None and view["configurations"][0]["train_ratio"] == 1.1


def test_bad_estimate_input_is_one_line_and_exit_2(tmp_path, capsys, write_campaign) -> None:
    from pilot_tui.commands.cli import main
    from pilot_tui.core.spec import SpecError, load_spec

    assert main(["estimate", "--model", str(tmp_path)]) == 2  # no config.json there
    assert main(["estimate", str(tmp_path / "missing.toml")]) == 2
    assert main(["estimate", "--model", str(tmp_path), "--strategy", "none", "--gpus", "4"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("pilot-tui: error: ") for line in err)
    assert "config.json" in err[0] and "missing.toml" in err[1] and "--strategy none" in err[2]
    with pytest.raises(SpecError, match=r"estimate\.strategy"):
        load_spec(write_campaign({"estimate": {"strategy": "zero3"}}))
