"""`pilot-tui init` then `pilot-tui run --headless`: the two commands on a local HF model and
JSONL data, every phase on CPU (resume and the fresh-process reload included); bad inputs end in
exit code 2 with one line naming the file and the line."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import pytest
import tomli_w
import torch

from pilot_tui.commands.cli import main as cli_main
from pilot_tui.core.spec import load_spec
from pilot_tui.core.steps import Step, campaign_steps
from pilot_tui.runner.context import RunContext
from pilot_tui.runner.phases.base import execute
from pilot_tui.tasks.loader import TaskError, load_task

REPO = Path(__file__).resolve().parents[2]


def init(model: Path, data: Path, out: Path, *extra: str) -> int:
    return cli_main(["init", "--model", str(model), "--data", str(data), "--out", str(out), *extra])


def shrink(path: Path, **changes) -> Path:
    """Smaller sizes for the test machine; everything else as `init` wrote it."""
    raw = tomllib.loads(path.read_text())
    raw["phases"]["steady_updates"] = 4
    raw["phases"]["steady_budget_s"] = 0.25  # timed to its precision for at most a quarter second
    raw["lr_board"]["updates"] = 4
    raw["lr_board"]["validate_every"] = 2
    raw["lr_board"]["seeds"] = raw["lr_board"]["seeds"][:1]
    # The fake-tensor estimate of an HF model has its own tests (tests/runner/test_estimate.py).
    raw["phases"]["skip"] = sorted({*raw["phases"].get("skip", []), "estimate", "machine"})
    for key, value in changes.items():
        raw.setdefault(key, {}).update(value) if isinstance(value, dict) else raw.__setitem__(key, value)
    path.write_text(tomli_w.dumps(raw))
    return path


def run_headless(spec: Path, records: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "pilot_tui", "run", str(spec), "--headless", "--records", str(records)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=env,
    )


def rows_of(records: Path) -> dict[str, dict]:
    (record,) = records.glob("*.toml")
    return {row["step"]: row for row in tomllib.loads(record.read_text())["phases"]}


@pytest.mark.slow
def test_init_then_run_passes_every_phase_with_tied_embeddings(hf, tmp_path, capsys):
    out = tmp_path / "campaign.toml"
    assert init(hf.tied_plain, hf.chat, out) == 0
    said = capsys.readouterr().out
    assert "wrote" in said and "max_length" in said
    text = out.read_text()
    # Commented and measured: the percentile, what it cuts, the effective batch, the group field.
    assert "99th percentile" in text and "it cuts 0 of 48 examples" in text
    assert 'group_field = "conversation_id"' in text and "examples per update" in text
    spec = load_spec(out).spec
    assert spec.task.builtin == "hf_causal_lm" and not spec.task.supervise_prompt
    assert spec.replay.inputs and {v.id for v in spec.variants} >= {"mb1", "ckpt"}
    proc = run_headless(shrink(out), tmp_path / "records")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = rows_of(tmp_path / "records")
    # A model piloted for a few updates has not learnt to stop: final says so, and nothing else.
    final = rows.pop("final")
    served = final["details"]["serving"]
    assert served["ok"] and served["single"] == served["batched"]  # batched replies equal single ones
    assert final["verdict"] == "pass" or final["reason"].startswith(
        f"{len(served['unstopped'])} of 3 replies did not stop within max_new_tokens 64"
    ), final["reason"]
    assert all(r["verdict"] == "pass" for r in rows.values()), {
        k: r["reason"] for k, r in rows.items() if r["verdict"] != "pass"
    }
    rows["final"] = final
    assert {"resume", "final", "steady@ckpt", "export"} <= set(rows)
    assert rows["resume"]["details"]["comparison"] == "bitwise"
    assert rows["stack"]["details"]["task_probe"]["ok"]
    assert any("pad token" in n for n in rows["load"]["details"]["task_notes"])
    # Greedy replayed replies end at the end-of-turn token (or the token budget), same after reload.
    assert all(c["same"] for c in rows["final"]["details"]["replays"])


def _short_run(spec: Path, tmp_path: Path) -> dict[str, dict]:
    """The phases up to the export, in this process (the runner's own `execute`): the full CLI
    path with its fresh processes is the tied-embeddings test's."""
    raw = tomllib.loads(spec.read_text())
    raw.pop("variants", None)
    raw["plan"]["priority"] = ["control"]
    spec.write_text(tomli_w.dumps(raw))
    loaded = load_spec(shrink(spec))
    ctx = RunContext(loaded, load_task(loaded), torch.device("cpu"), lambda m: None, tmp_path)
    closing = ("lr_run", "resume", "final", "fit_search")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the runner does beside a busy view: no OpenMP spinning on 2 cores
    try:
        return {s.key: execute(ctx, s, {}) for s in campaign_steps(loaded.spec) if s.phase not in closing}
    finally:
        torch.set_num_threads(threads)


def test_train_on_all_declares_a_supervised_prompt(hf, tmp_path):
    out = tmp_path / "campaign.toml"
    assert init(hf.untied_marked, hf.chat, out, "--train-on", "all") == 0
    spec = load_spec(out).spec
    assert spec.task.supervise_prompt and spec.task.options["train_on"] == "all"
    assert init(hf.untied_marked, hf.chat, out) == 2  # an existing campaign is not overwritten


def test_init_then_run_with_generation_markers_and_untied_embeddings(hf, tmp_path):
    out = tmp_path / "campaign.toml"
    assert init(hf.untied_marked, hf.chat, out) == 0
    assert "assistant mask" in out.read_text()
    rows = _short_run(out, tmp_path)
    assert all(r["verdict"] == "pass" for r in rows.values()), {
        k: r["reason"] for k, r in rows.items() if r["verdict"] != "pass"
    }


def test_sequence_classification_init_and_run(hf, tmp_path):
    out = tmp_path / "campaign.toml"
    assert init(hf.classifier, hf.sentiment, out) == 0
    assert 'builtin = "hf_sequence_classification"' in out.read_text()
    rows = _short_run(out, tmp_path)
    assert all(r["verdict"] == "pass" for r in rows.values()), {
        k: r["reason"] for k, r in rows.items() if r["verdict"] != "pass"
    }
    assert "label_meaning" in {c["name"] for c in rows["inspect"]["details"]["checks"]}


def _inspect(spec: Path, tmp_path: Path) -> dict:
    loaded = load_spec(spec)
    ctx = RunContext(loaded, load_task(loaded), torch.device("cpu"), lambda m: None, tmp_path)
    return execute(ctx, Step("inspect", "inspect"), {})


def test_a_shuffled_id2label_fails_inspect(hf, tmp_path):
    data = tmp_path / "int.jsonl"
    rows = [
        {"text": f"the film was {w}", "label": int(w in ("good", "great")), "label_name": n}
        for w, n in [("good", "positive"), ("bad", "negative"), ("great", "positive"), ("awful", "negative")]
        * 4
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "campaign.toml"
    assert init(hf.classifier_shuffled, data, out) == 0
    row = _inspect(out, tmp_path)
    assert row["verdict"] == "fail"
    assert "id 0 is named 'positive' but its examples are 'negative'" in row["reason"]


def test_a_template_whose_assistant_turns_cannot_be_located_fails_inspect(hf, tmp_path):
    out = tmp_path / "campaign.toml"
    assert init(hf.unlocatable, hf.chat, out) == 0
    row = _inspect(out, tmp_path)
    assert row["verdict"] == "fail" and "cannot be located" in row["reason"]


def test_an_eos_that_is_not_the_end_of_turn_token_warns_at_inspect(hf, tmp_path):
    out = tmp_path / "eos-only" / "campaign.toml"
    out.parent.mkdir()
    assert init(hf.eos_only, hf.chat, out) == 0
    row = _inspect(out, out.parent)
    (c,) = [c for c in row["details"]["checks"] if c["name"] == "eos_tokens"]
    assert row["verdict"] == "warn" and c["verdict"] == "warn", row["reason"]
    assert "generation_config eos_token_id [2] does not include '<|end|>' (id 6)" in c["message"]
    twin = tmp_path / "both" / "campaign.toml"
    twin.parent.mkdir()
    assert init(hf.tied_plain, hf.chat, twin) == 0
    good = _inspect(twin, twin.parent)
    (g,) = [c for c in good["details"]["checks"] if c["name"] == "eos_tokens"]
    assert good["verdict"] == "pass" and g["verdict"] == "pass", good["reason"]


def test_a_jsonl_file_with_a_byte_order_mark_reads_like_its_twin(hf, tmp_path):
    from pilot_tui.tasks.hf_data import read_jsonl

    marked = tmp_path / "bom.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + hf.chat.read_bytes())  # as Windows tools save UTF-8
    assert read_jsonl(marked) == read_jsonl(hf.chat)
    assert init(hf.tied_plain, marked, tmp_path / "c.toml") == 0


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"messages": [{"role": "user"', "line 3: not valid JSON"),
        ('{"text": "no messages here"}', "line 3: missing field 'messages'"),
        (
            '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": " "}]}',
            "line 3: messages[1]: empty assistant turn",
        ),
    ],
)
def test_bad_data_is_one_line_naming_file_and_line(hf, tmp_path, capsys, line, expected):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(hf.chat.read_text().splitlines(keepends=True)[:2]) + line + "\n")
    assert init(hf.tied_plain, data, tmp_path / "c.toml") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{data}: {expected}" in err
    assert not (tmp_path / "c.toml").exists()
    # The same data under `run`: the task refuses it with the same line.
    spec = tmp_path / "ok.toml"
    assert init(hf.tied_plain, hf.chat, spec) == 0
    raw = tomllib.loads(spec.read_text())
    raw["task"]["options"]["data"] = str(data)
    spec.write_text(tomli_w.dumps(raw))
    with pytest.raises(TaskError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        load_task(load_spec(spec))


def test_an_unreadable_model_dir_is_one_line(hf, tmp_path, capsys):
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{ not json")
    assert init(broken, hf.chat, tmp_path / "c.toml") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{broken / 'config.json'}: line 1: not valid JSON" in err


def test_a_bad_model_dir_under_run_is_one_bad_input_line(hf, tmp_path):
    spec = tmp_path / "campaign.toml"
    assert init(hf.tied_plain, hf.chat, spec) == 0
    raw = tomllib.loads(spec.read_text())
    raw["task"]["options"]["model"] = "no-such-model"
    spec.write_text(tomli_w.dumps(raw))
    # The runner's open path, in this process: what it would send to the view (exit 2 there).
    from pilot_tui.core.events import OpenCampaign
    from pilot_tui.runner.main import Channel, open_campaign

    out = io.StringIO()
    open_campaign(
        OpenCampaign(spec_path=str(spec), work_dir=str(tmp_path / "work")),
        Channel(out).emit,
        threading.Event(),
    )
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    # What the runner says while it opens (events.Opening) precedes its one answer.
    assert [e["kind"] for e in events if e["kind"] != "opening"] == ["bad_input"]
    assert events[-1]["message"] == f"{tmp_path / 'no-such-model'}: model directory not found"
