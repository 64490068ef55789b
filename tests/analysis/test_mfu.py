"""MFU from measured tokens per second, the parameter count and the GPU's dense peak."""

from __future__ import annotations

import pytest

from pilot_tui.analysis.mfu import flops_per_token, mfu


def test_a_full_fine_tune_is_six_flops_per_parameter_and_token_against_the_dense_peak() -> None:
    assert flops_per_token(8_000_000_000, 8_000_000_000) == 6 * 8e9
    found = mfu(3_000.0, 8_000_000_000, 8_000_000_000, "NVIDIA H100 80GB HBM3", "bf16")
    # 6 × 8e9 × 3 000 = 144 TFLOP/s against H100 SXM's dense bf16 989: 14.6 %.
    assert found["mfu"] == pytest.approx(144 / 989, abs=1e-5)
    assert "989" in found["peak"] and "datasheet" in found["peak"] and "torchtitan" in found["expected"]


def test_a_frozen_base_counts_its_forward_and_backward_but_no_weight_gradients() -> None:
    # LoRA: 1 % of the weights train: 4·N + 2·T, not 6·N.
    assert flops_per_token(1_000_000, 10_000) == 4_000_000 + 20_000


def test_no_peak_no_figure_and_the_row_says_why() -> None:
    assert mfu(1_000.0, 10, 10, None, "fp32")["why"] == "a CPU: no dense peak to compare with"
    assert "no datasheet peak known" in mfu(1_000.0, 10, 10, "Some Future GPU", "bf16")["why"]
    assert "no bf16 tensor-core peak" in mfu(1_000.0, 10, 10, "Tesla V100-SXM2-32GB", "bf16")["why"]
    assert "mfu" not in mfu(None, 10, 10, "NVIDIA H200", "bf16")  # a record holds no None
