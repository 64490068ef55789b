"""bf16 weights without fp32 master copies at a fine-tuning LR: most of the first update rounds
away. A Trainer script that loads its model in bfloat16 and trains it at lr 2e-5 fails first_step
naming that, from the optimizer's own state; its fp32 twin at the same LR passes. The
accumulation check holds the bf16 run to the tolerance its precision explains, never blaming the
loss's normalisation for bf16 rounding."""

from __future__ import annotations

import pytest
import torch

from pilot_tui.core import phase_table
from pilot_tui.runner.checks.precision import rounded_away

from .conftest import run_in_process

pytestmark = pytest.mark.slow
ONLY = {"skip": [p for p in phase_table.names() if p not in ("load", "first_step")]}


def _args(tiny) -> list[str]:
    return ["--model", str(tiny.model), "--data", str(tiny.prompt_completion), "--output_dir", "out"]


def test_bf16_weights_at_lr_2e5_fail_first_step_and_the_fp32_twin_passes(tiny, tmp_path):
    bf16 = run_in_process(tmp_path / "bf16", "bf16_weights.py", _args(tiny), phases=ONLY)
    row = bf16.row("first_step")
    assert row["verdict"] == "fail", bf16.out
    found = row["details"]["precision"]
    assert found["parameter_dtypes"] == {"bfloat16": found["half_precision_elements"]} and found["lr"] == 2e-5
    assert found["rounded_away_share"] > 0.5
    assert "bfloat16 weights stepped without fp32 master copies at lr 2e-05" in row["reason"]
    assert "keep the weights in float32" in row["reason"]
    # bf16's rounding is the accumulation check's tolerance, said; not a normalisation fault.
    acc = row["details"]["accumulation"]
    assert acc["ok"] and acc["tolerance"] == pytest.approx(3e-2)
    fp32 = run_in_process(tmp_path / "fp32", "plain_trainer.py", [*_args(tiny), "--lr", "2e-5"], phases=ONLY)
    assert fp32.row("first_step")["verdict"] == "pass", fp32.out
    assert "precision" not in fp32.row("first_step")["details"]


@pytest.mark.parametrize("lr", [2e-5, 1e-3])
def test_the_share_read_from_the_optimizer_is_the_share_that_did_not_move(lr):
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(20_000, dtype=torch.bfloat16) * 0.02)
    optimizer = torch.optim.AdamW([p], lr=lr)
    before = p.detach().clone()
    p.grad = torch.randn_like(p)
    optimizer.step()
    unchanged = float((p.detach() == before).float().mean())
    assert rounded_away(optimizer).share == pytest.approx(unchanged, abs=0.01)
