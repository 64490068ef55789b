"""What the built-in HF tasks supervise, token by token, and what they refuse (in-process, real
tokenizers and tiny Llama models built by conftest)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from pilot_tui.runner.loop.replay import replay_inputs
from pilot_tui.tasks import hf_causal_lm, hf_sequence_classification
from pilot_tui.tasks.hf_chat import IGNORE
from pilot_tui.tasks.hf_data import DataError

CHAT = [
    {"role": "system", "content": "answer briefly"},
    {"role": "user", "content": "rev: abc"},
    {"role": "assistant", "content": "cba"},
    {"role": "user", "content": "up: abc"},
    {"role": "assistant", "content": "ABC"},
]


def _write(folder: Path, rows: list[dict], name: str = "data.jsonl") -> Path:
    path = folder / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _supervised(task, example) -> list[str]:
    """The supervised tokens of one example, decoded, one string per contiguous run."""
    batch = task.collate([example], 0)
    runs, current = [], ""
    for token, label in zip(batch["input_ids"][0].tolist(), batch["labels"][0].tolist(), strict=True):
        if label != IGNORE:
            assert label == token
            current += task.decode_token(token)
        elif current:
            runs.append(current)
            current = ""
    return [*runs, current] if current else runs


@pytest.mark.parametrize("model", ["tied_plain", "untied_marked"])
def test_every_assistant_turn_and_its_end_token_and_nothing_else(hf, tmp_path, model):
    data = _write(tmp_path, [{"messages": CHAT}])
    task = hf_causal_lm.make_task(str(getattr(hf, model)), str(data))
    assert _supervised(task, task.examples[0]) == ["cba<|end|>", "ABC<|end|>"]
    assert [(c.name, c.verdict) for c in task.data_checks()] == [
        ("assistant_turns", "pass"),
        ("eos_tokens", "pass"),
    ]
    last = hf_causal_lm.make_task(str(getattr(hf, model)), str(data), train_on="last_assistant")
    assert _supervised(last, last.examples[0]) == ["ABC<|end|>"]
    every = hf_causal_lm.make_task(str(getattr(hf, model)), str(data), train_on="all")
    batch = every.collate(every.examples, 0)
    assert torch.equal(batch["labels"], batch["input_ids"])
    # The prompt ends where the first assistant reply starts: the prompt check sees the difference.
    assert (
        every.collate(every.examples, 0)["prompt_length"].item()
        == task.collate(task.examples, 0)["prompt_length"].item()
    )


def test_padding_never_masks_the_real_eos_when_pad_is_eos(hf, tmp_path):
    rows = [
        {"prompt": "rev: abc", "completion": "cba"},
        {"prompt": "rev: abcdefgh", "completion": "hgfedcba"},
    ]
    task = hf_causal_lm.make_task(str(hf.tied_plain), str(_write(tmp_path, rows)), format="prompt_completion")
    assert task.pad_id in task.stop_ids  # pad token = eos in this tokenizer
    batch = task.collate(task.examples, 0)
    short = int(batch["attention_mask"][0].sum())
    assert short < batch["input_ids"].shape[1]  # the first row is padded
    assert batch["labels"][0, short - 1] == task.pad_id  # its real EOS is supervised
    assert (batch["labels"][0, short:] == IGNORE).all()  # the padding is not
    assert _supervised(task, task.examples[0]) == ["cba</s>"]
    assert "pad token '</s>'" in task.notes[0]


def test_text_supervises_every_token_and_a_missing_pad_is_chosen_and_said(hf, tmp_path):
    task = hf_causal_lm.make_task(
        str(hf.untied_marked), str(_write(tmp_path, [{"text": "abc def"}])), format="text"
    )
    batch = task.collate(task.examples, 0)
    assert torch.equal(batch["labels"], batch["input_ids"]) and batch["prompt_length"].item() == 0
    assert "has none" in task.notes[0]


def test_sharegpt_needs_its_declared_mapping_and_unknown_roles_are_named(hf, tmp_path):
    turns = [{"from": "human", "value": "rev: abc"}, {"from": "gpt", "value": "cba"}]
    data = _write(tmp_path, [{"conversations": turns}])
    with pytest.raises(DataError, match=r"line 1: missing field 'messages'.*ShareGPT"):
        hf_causal_lm.make_task(str(hf.tied_plain), str(data))
    mapping = {"human": "user", "gpt": "assistant"}
    kw = {"messages_field": "conversations", "role_key": "from", "content_key": "value"}
    task = hf_causal_lm.make_task(str(hf.tied_plain), str(data), roles=mapping, **kw)
    assert _supervised(task, task.examples[0]) == ["cba<|end|>"]
    bad = _write(tmp_path, [{"conversations": [*turns, {"from": "tool", "value": "x"}]}], "bad.jsonl")
    with pytest.raises(DataError, match=r"bad.jsonl: line 1: conversations\[2\]: unknown role 'tool'"):
        hf_causal_lm.make_task(str(hf.tied_plain), str(bad), roles=mapping, **kw)


def test_a_template_that_hides_assistant_turns_fails_the_check_with_the_reason(hf):
    task = hf_causal_lm.make_task(str(hf.unlocatable), str(hf.chat))
    check, _eos = task.data_checks()
    assert check.verdict == "fail"
    assert (
        "cannot be located" in check.message
        and "is not where the template puts the assistant reply" in check.message
    )
    assert all(label == IGNORE for label in task.collate(task.examples[:1], 0)["labels"][0].tolist())


def test_weights_are_required_unless_a_fresh_start_is_declared(hf, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (hf.tied_plain / name).exists():
            (bare / name).write_bytes((hf.tied_plain / name).read_bytes())
    with pytest.raises(DataError, match=r"bare: no weights .*fresh_init = true"):
        hf_causal_lm.make_task(str(bare), str(hf.chat))
    task = hf_causal_lm.make_task(str(bare), str(hf.chat), fresh_init=True)
    assert sum(p.numel() for p in task.build_model().parameters()) > 0


def test_control_generation_stops_at_the_end_token(hf):
    task = hf_causal_lm.make_task(str(hf.tied_plain), str(hf.chat), max_new_tokens=12)
    torch.manual_seed(0)
    model = task.build_model()
    (free,) = replay_inputs(task, model, ["rev: abc"], 64, torch.device("cpu"))
    assert len(free.ids) == 12 or free.ids[-1] in task.stop_ids
    # Whatever the model says first, declared as a stop token, ends the reply right there.
    stopping = dataclasses.replace(task, stop_ids=(free.ids[0],))
    (stopped,) = replay_inputs(stopping, model, ["rev: abc"], 64, torch.device("cpu"))
    assert stopped.ids == free.ids[:1]


def test_lora_trains_the_adapter_and_exports_only_it(hf):
    task = hf_causal_lm.make_task(
        str(hf.untied_marked), str(hf.chat), lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    )
    torch.manual_seed(0)
    model = task.build_model()
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert 0 < trainable < sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(0.5)  # a trained adapter: the reload must carry it
    exported = {k: v.clone() for k, v in task.export_state(model).items()}
    assert exported and all("lora" in k for k in exported)
    batch = task.collate(task.examples[:2], 0)
    torch.manual_seed(1)
    fresh = task.build_model()
    task.load_export(fresh, exported)
    model.eval()
    fresh.eval()
    assert torch.equal(task.forward(model, batch), task.forward(fresh, batch))


def test_classification_names_come_from_id2label_and_unknown_labels_are_named(hf, tmp_path):
    task = hf_sequence_classification.make_task(str(hf.classifier), str(hf.sentiment))
    assert task.class_names == ("negative", "positive")
    assert {task.class_names[ex["label"]] for ex in task.examples} == {"negative", "positive"}
    assert all(task.class_names[ex["label"]] == task.label_meaning(ex) for ex in task.examples)
    bad = _write(tmp_path, [{"text": "a", "label": "positive"}, {"text": "b", "label": "neutral"}])
    with pytest.raises(
        DataError, match=r"data.jsonl: line 2: label 'neutral' is not in the model config's label2id"
    ):
        hf_sequence_classification.make_task(str(hf.classifier), str(bad))


def test_a_missing_optional_dependency_names_the_extra(hf, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "peft", None)  # as if `[hf]` lacked it
    with pytest.raises(DataError, match=r"need 'peft': pip install 'pilot-tui\[hf\]'"):
        hf_causal_lm.make_task(str(hf.tied_plain), str(hf.chat), lora={"r": 2}).build_model()
