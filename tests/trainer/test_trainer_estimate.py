"""The fake-tensor estimate of a captured trainer's model, in this process: the LoRA script's
adapter alone counted exactly (no allocator rounding), and the trainer's `optim` as the
estimate's optimizer. (The plain script's estimate runs in its campaign, test_plain_trainer.py.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pilot_tui.runner.memory.estimate.fake_run import FakeConfig, run_fake
from pilot_tui.runner.subject.trainer.adapter import adapt
from pilot_tui.runner.subject.trainer.capture import capture
from pilot_tui.runner.subject.trainer.estimate import trainer_optimizer
from pilot_tui.runner.subject.trainer.loop import unwrapped

from .conftest import SCRIPTS

pytest.importorskip("peft")


def test_the_estimate_of_a_peft_model_counts_the_adapter_alone(tiny, tmp_path):
    args = ["--model", str(tiny.model), "--data", str(tiny.prompt_completion), "--output_dir", "out"]
    adapter = adapt(capture(SCRIPTS / "lora_two_evals.py", args, cwd=tmp_path).trainer)
    params = list(unwrapped(adapter.trainer).parameters())
    total, trainable = sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad)
    cfg = FakeConfig("control", 2, 2, adapter.longest(), "fp32", False, allocator_rounding=False)
    out = run_fake(adapter.estimate_source(), cfg)
    assert out["estimable"], out
    assert out["trainable_parameters"] == trainable
    assert out["parameters_bytes"] == 4 * total  # float32, the frozen base included
    # Gradients and AdamW's two moments only for what trains: the adapter alone under LoRA.
    assert (out["gradients_bytes"], out["optimizer_state_bytes"]) == (4 * trainable, 8 * trainable)
    assert out["sequence_length"] == adapter.longest()
    assert trainable < total / 10


@pytest.mark.parametrize(
    ("optim", "name", "said"),
    [
        ("adamw_torch", "adamw", "adamw_torch estimated as adamw"),
        ("adamw_torch_fused", "adamw_fused", "estimated as adamw_fused"),
        ("adafactor", "adafactor", "the same factored state"),
        ("adamw_bnb_8bit", "adamw", "quantised"),
        ("lion_32bit", "adamw", "does not know its state"),
    ],
)
def test_the_trainers_optim_is_the_estimates_where_it_is_known(optim, name, said):
    chosen, note = trainer_optimizer(SimpleNamespace(optim=optim))
    assert chosen == name and said in note


def test_a_model_holding_two_adapters_is_said_not_estimable(tiny):
    # Which adapter trains is the script's choice: the estimate refuses to guess, naming them.
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from pilot_tui.runner.subject.trainer.estimate import NotEstimable, rebuilder

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny.model), LoraConfig(r=4))
    _, what = rebuilder(model)  # the correct twin: one adapter
    assert "LORA adapter r=4" in what
    model.add_adapter("other", LoraConfig(r=2, target_modules=["v_proj"]))
    with pytest.raises(NotEstimable, match=r"holds 2 adapters \(default, other\)"):
        rebuilder(model)
