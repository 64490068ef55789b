"""A `Seq2SeqTrainer` script on an encoder-decoder (T5) piloted unchanged: its rows read through
their causal view (encoder input as context, each target scored at its own position), its loss
unshifted; and a broken twin whose padded targets are learnt."""

from __future__ import annotations

import pytest

from .conftest import LATER, SCRIPTS, _tiny_assets, run_in_process, shared_campaign

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def t5(tiny):
    return _tiny_assets().build_seq2seq(tiny)


def _args(tiny, t5) -> list[str]:
    return ["--model", str(t5), "--data", str(tiny.prompt_completion), "--output_dir", "out"]


@pytest.fixture(scope="module")
def s2s(tiny, t5, tmp_path_factory):
    # resume and final are the trainer's own paths, run by the causal campaigns: skipped here.
    return shared_campaign(
        tmp_path_factory,
        "seq2seq",
        "seq2seq.py",
        _args(tiny, t5),
        in_process=True,
        phases={"steady_updates": 3, "skip": ["resume", "final"]},
        overfit={"examples": 4, "max_steps": 200, "lr": 0.01},
        replay={"inputs": ["up: abc ="]},
    )


def test_the_data_gates_read_targets_and_the_reply_is_decoded(s2s):
    verdicts = s2s.verdicts()
    for gate in ("inspect", "split", "overfit", "load", "eval_longest", "save", "export"):
        assert verdicts[gate] == "pass", s2s.out
    # The estimate says why it does not estimate an encoder-decoder, as a warning.
    assert verdicts["estimate"] == "warn" and "encoder-decoder" in s2s.row("estimate")["reason"]
    # Overfit's argmax reads logit j against target j (no shift): a learnt subset is recovered.
    assert s2s.row("overfit")["details"]["recovered"] > 0.5
    window = s2s.row("inspect")["details"]
    text = str(window)
    assert "encoder_decoder" in text and "num_items_in_batch" in text
    # The export's greedy reply grew a decoder from its start token: some decoded text.
    controls = s2s.row("export")["details"]["controls"]
    assert controls[0]["input"] == "up: abc =" and controls[0]["output"]


def test_a_mean_per_microbatch_model_loss_is_named_and_measured_at_first_step(s2s):
    # T5's forward takes **kwargs, so the Trainer leaves num_items_in_batch to it, but its loss
    # is each microbatch's mean: accumulated, the update is N times too large. The script trains
    # at accumulation 1, so its own updates are right: a warning with the factor and the cure.
    row = s2s.row("first_step")
    assert row["verdict"] == "warn", s2s.out
    reason = row["reason"]
    assert "T5ForConditionalGeneration's own loss" in reason and "does not accumulate" in reason
    # Turning model_accepts_loss_kwargs off only scales it: targets per microbatch still vary.
    assert not row["details"]["accumulation"]["cured"]["ok"] and "compute_loss_func" in reason


def test_targets_padded_with_the_pad_id_fail_inspect(tiny, t5, tmp_path):
    run = run_in_process(
        tmp_path,
        "seq2seq_padded_targets.py",
        _args(tiny, t5),
        phases={"skip": LATER},
    )
    row = run.row("inspect")
    assert run.rc == 1 and row["verdict"] == "fail", run.out
    assert "padding_supervised" in str(row["details"]) and "padding counted in the loss" in row["reason"]
    assert (SCRIPTS / "seq2seq_padded_targets.py").is_file()
