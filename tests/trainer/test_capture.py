"""The capture in this process on small scripts written here: what unwinds, what is bad input."""

from __future__ import annotations

import sys
import textwrap

import pytest

from pilot_tui.runner.subject.trainer.capture import CaptureError, capture
from pilot_tui.runner.subject.trainer.resume_gate import compare_steps

BUILD = """
    import sys
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
    import helper  # beside the script: the script's folder is on the import path

    model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
    data = Dataset.from_dict({"input_ids": [[1, 2, 3]] * 4, "labels": [[1, 2, 3]] * 4})
    trainer = Trainer(model=model, args=TrainingArguments(output_dir="o", report_to="none"), train_dataset=data)
"""


def _script(tmp_path, body: str, name: str = "train.py"):
    (tmp_path / "helper.py").write_text("VALUE = 1\n")
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_train_is_captured_even_under_except_exception(tiny, tmp_path):
    script = _script(
        tmp_path,
        BUILD
        + """
    try:
        trainer.train(resume_from_checkpoint=None)
    except Exception:
        raise SystemExit("a script's own handler must not swallow the capture")
    raise SystemExit("never reached: the capture unwinds the script")
    """,
    )
    argv_before = list(sys.argv)
    got = capture(script, [str(tiny.model)], cwd=tmp_path)
    assert type(got.trainer).__name__ == "Trainer" and got.trainers_built == 1
    assert got.train_kwargs == {"resume_from_checkpoint": None}
    assert sys.argv == argv_before  # restored
    # The patch is gone: a later train() is the library's own.
    import transformers

    assert transformers.Trainer.train.__qualname__ == "Trainer.train"


def test_a_script_raising_is_named_with_its_line(tmp_path):
    script = _script(tmp_path, "x = 1\ny = x / 0\n")
    with pytest.raises(
        CaptureError, match=r"train\.py: line 2 raised before calling train\(\): ZeroDivisionError"
    ):
        capture(script, [], cwd=tmp_path)


def test_a_syntax_error_is_named_with_its_line(tmp_path):
    script = _script(tmp_path, "x = 1\nif x\n")
    with pytest.raises(CaptureError, match=r"train\.py: line 2 raised before calling train\(\): SyntaxError"):
        capture(script, [], cwd=tmp_path)


def test_an_argparse_error_says_what_argparse_said(tmp_path):
    script = _script(
        tmp_path,
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--model', required=True)\np.parse_args()\n",
    )
    with pytest.raises(CaptureError) as caught:
        capture(script, ["--modle", "x"], cwd=tmp_path)
    message = str(caught.value)
    assert "exited with status 2 before calling train()" in message
    assert "the following arguments are required: --model" in message


def test_a_script_that_never_trains(tiny, tmp_path):
    script = _script(tmp_path, BUILD + "\n    if '--do_train' in sys.argv:\n        trainer.train()\n")
    with pytest.raises(CaptureError, match=r"built 1 Trainer but never called train\(\).*--do_train"):
        capture(script, [str(tiny.model)], cwd=tmp_path)
    nothing = _script(tmp_path, "print('hello')\n", "nothing.py")
    with pytest.raises(CaptureError, match="finished without building a Trainer"):
        capture(nothing, [], cwd=tmp_path)


def test_the_resume_comparison_is_exact_and_missing_values_differ():
    a = {3: {"loss": "0x1p+0", "grad_norm": "0x1p-1", "learning_rate": "0x1p-10", "digest": "d3"}}
    same, first = compare_steps(a, {3: dict(a[3])}, range(3, 4))
    assert first is None and same[0]["digest_same"]
    off = dict(a[3], loss="0x1.0000000000001p+0")  # one ulp
    _, first = compare_steps(a, {3: off}, range(3, 4))
    assert first == (3, ["loss"])
    _, first = compare_steps(a, {3: {k: v for k, v in a[3].items() if k != "digest"}}, range(3, 4))
    assert first == (3, ["digest"])
    _, first = compare_steps({4: {}}, {4: {}}, range(4, 5))  # nothing logged is not "equal"
    assert first is not None


def test_a_probe_raising_in_the_loop_unwinds_train(tiny, tmp_path):
    """How a cancel or a phase's time ceiling stops the trainer's own loop mid-run."""
    from pilot_tui.runner.subject.trainer.loop import train_steps
    from pilot_tui.runner.subject.trainer.probe import StepProbe
    from pilot_tui.runner.subject.trainer.settings import apply_pilot_settings

    script = _script(tmp_path, BUILD + "\n    trainer.train()\n")
    trainer = capture(script, [str(tiny.model)], cwd=tmp_path).trainer
    apply_pilot_settings(trainer, tmp_path / "out")

    class Stop(Exception):
        pass

    def on_step(step, total, loss):
        assert total == 50 and loss is not None
        if step == 2:
            raise Stop

    probe = StepProbe(on_step=on_step)
    with pytest.raises(Stop):
        train_steps(trainer, 50, probe)
    assert trainer.state.global_step == 2 and sorted(probe.rows) == [1, 2]
    assert probe not in trainer.callback_handler.callbacks  # removed even on the way out
