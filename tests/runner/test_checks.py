"""The data and objective checks (`inspect`, `split`, `overfit`) through the real phase.

Every check passes on one campaign and fails (or warns) on another, on real generated data, in a
runner; figures are recomputed here from the task itself, never hard-coded. One Session per
campaign, shared by the tests that use it. The runner runs on a thread of this process
(`InProcessLink`: the same `serve` and phase bodies): these tests are about the checks, and a
runner process would cost a torch import each; the process boundary is tested elsewhere.
"""

from __future__ import annotations

import collections
import contextlib
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from conftest import CAMPAIGNS, FAST, deep_merge, demo_raw

from pilot_tui.analysis.splits import group_split
from pilot_tui.core.events import PhaseFinished, PhaseProgress
from pilot_tui.core.phase_table import in_group
from pilot_tui.runner.in_process import InProcessLink
from pilot_tui.session.driver import Session
from pilot_tui.tasks import demo_classify, demo_instruct

ROLES = {"supervised", "ignored", "padding", "cut"}
RATIOS = {"train": 0.8, "validation": 0.1, "test": 0.1}


# ------------------------------------------------------------------------------------------ helpers


def write(folder: Path, raw: dict[str, Any]) -> Path:
    for section in ("variants", "lr_board"):
        raw.pop(section, None)
    path = folder / "campaign.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


def instruct_raw(changes: dict[str, Any] | None = None) -> dict[str, Any]:
    return deep_merge(deep_merge(demo_raw(), FAST), changes or {})


def classify_raw(changes: dict[str, Any] | None = None) -> dict[str, Any]:
    raw = tomllib.loads((CAMPAIGNS / "demo-classify.toml").read_text())
    return deep_merge(raw, changes or {})


class Pilot:
    """A started Session and the rows it produced, by step key and overrides."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.events: list[Any] = []

    def run(self, key: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        events = list(self.session.run_step(key, overrides))
        self.events = events
        rows = [ev.row for ev in events if isinstance(ev, PhaseFinished)]
        assert len(rows) == 1, events
        return rows[0]

    def record(self) -> dict[str, Any]:
        assert self.session.record is not None
        return tomllib.loads(self.session.record.path.read_text(encoding="utf-8"))


@contextlib.contextmanager
def pilot_for(tmp_path_factory, name: str, raw: dict[str, Any] | Path) -> Iterator[Pilot]:
    folder = tmp_path_factory.mktemp(name)
    path = raw if isinstance(raw, Path) else write(folder, raw)
    session = Session(path, folder / "records", link=InProcessLink())
    session.start()
    try:
        yield Pilot(session)
    finally:
        session.close()


def checks(row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in row["details"]["checks"]}


def verdicts(row: dict[str, Any]) -> dict[str, str]:
    return {name: c["verdict"] for name, c in checks(row).items()}


def instruct_task(raw: dict[str, Any]):
    return demo_instruct.make_task(**raw["task"]["options"])


def lengths(ex: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, all tokens) of a demo example, counted from its text."""
    prompt = 1 + len(ex["prompt"]) + 1  # <bos> prompt <sep>
    return prompt, prompt + len(ex["response"]) + 1  # response <eos>


# ------------------------------------------------------------------------------------------ sessions


@pytest.fixture(scope="module")
def instruct(tmp_path_factory) -> Iterator[Pilot]:
    with pilot_for(tmp_path_factory, "instruct", instruct_raw()) as pilot:
        yield pilot


@pytest.fixture(scope="module")
def instruct_wrong(tmp_path_factory) -> Iterator[Pilot]:
    """Padding labelled, duplicate words allowed, split by id instead of by conversation."""
    raw = instruct_raw(
        {
            "task": {
                "options": {"n_conversations": 240, "label_padding": True, "unique_words": False},
                "group_key": "id",
            }
        }
    )
    with pilot_for(tmp_path_factory, "instruct_wrong", raw) as pilot:
        yield pilot


@pytest.fixture(scope="module")
def periods(tmp_path_factory) -> Iterator[Pilot]:
    raw = instruct_raw({"task": {"options": {"periods": 12}, "group_key": "period", "group_kind": "time"}})
    with pilot_for(tmp_path_factory, "periods", raw) as pilot:
        yield pilot


@pytest.fixture(scope="module")
def periods_ready(tmp_path_factory) -> Iterator[Pilot]:
    """Ready splits assigned per conversation by a hash: one period per conversation, so no
    group leaks, but validation and test periods are not after train."""
    raw = instruct_raw(
        {
            "task": {
                "options": {"periods": 60, "split_field": "conversation"},
                "group_key": "period",
                "group_kind": "time",
            },
            "split": {"field": "split"},
        }
    )
    with pilot_for(tmp_path_factory, "periods_ready", raw) as pilot:
        yield pilot


@pytest.fixture(scope="module")
def classify(tmp_path_factory) -> Iterator[Pilot]:
    with pilot_for(tmp_path_factory, "classify", classify_raw()) as pilot:
        yield pilot


@pytest.fixture(scope="module")
def classify_twice(tmp_path_factory) -> Iterator[Pilot]:
    """The task names a class twice and names a class no example has."""
    names = ["circle", "square", "triangle", "star", "circle"]
    raw = classify_raw({"task": {"options": {"class_names": names}, "class_names": []}})
    with pilot_for(tmp_path_factory, "classify_twice", raw) as pilot:
        yield pilot


@pytest.fixture(scope="module")
def classify_short(tmp_path_factory) -> Iterator[Pilot]:
    """Three declared names for four classes."""
    raw = classify_raw({"task": {"class_names": ["circle", "square", "triangle"]}})
    with pilot_for(tmp_path_factory, "classify_short", raw) as pilot:
        yield pilot


# ------------------------------------------------------------------------------------------ inspect


def test_inspect_passes_on_the_demo_and_shows_tokens_as_collated(instruct):
    row = instruct.run("inspect")
    assert row["verdict"] == "pass", row["reason"]
    assert set(verdicts(row).values()) == {"pass"}
    d = row["details"]
    raw = tomllib.loads(instruct.session.loaded.text)
    task = instruct_task(raw)
    assert d["examples_scanned"] == len(task.examples)
    assert d["zero_supervised"] == d["prompt_supervised"] == d["responses_cut"] == 0
    # Every response token plus <eos> is supervised, nothing else.
    assert d["supervised_tokens"] == sum(len(ex["response"]) + 1 for ex in task.examples)
    assert len(d["examples"]) == raw["inspect"]["examples"]
    by_id = {ex["id"]: ex for ex in task.examples}
    for shown in d["examples"]:
        ex = by_id[shown["id"]]
        prompt, total = lengths(ex)
        tokens = shown["tokens"]
        assert {t["role"] for t in tokens} <= ROLES
        real = [t for t in tokens if t["mask"] == 1]
        assert "".join(t["piece"] for t in real) == f"<bos>{ex['prompt']}<sep>{ex['response']}<eos>"
        assert shown["raw_length"] == shown["truncated_length"] == total == len(real)
        assert shown["padded_length"] == len(tokens)
        assert [t["role"] for t in real] == ["ignored"] * prompt + ["supervised"] * (total - prompt)
        assert all(t["label"] == -100 for t in real[:prompt])
        assert [t["label"] for t in real[prompt:]] == [t["id"] for t in real[prompt:]]
        assert all(t["role"] == "padding" for t in tokens[total:])
        assert shown["supervised"] == total - prompt and not shown["prompt_supervised"]
        assert shown["text"].startswith(f"<bos>{ex['prompt']}<sep>[{ex['response']}<eos>]")
    # The record alone shows what the loss saw.
    stored = next(r for r in instruct.record()["phases"] if r["step"] == "inspect")
    assert stored["details"]["examples"] == d["examples"]


def test_inspect_fails_when_max_length_cuts_every_label(instruct):
    raw = tomllib.loads(instruct.session.loaded.text)
    task = instruct_task(raw)
    max_length = 16
    row = instruct.run("inspect", {"max_length": max_length})
    assert row["verdict"] == "fail"
    v = verdicts(row)
    assert v["supervised_tokens"] == "fail" and v["responses_cut"] == "warn"
    assert v["prompt_supervision"] == v["padding_supervised"] == "pass"
    lost = [ex["id"] for ex in task.examples if lengths(ex)[0] >= max_length]
    cut = [ex["id"] for ex in task.examples if lengths(ex)[1] > max_length]
    assert lost, "the fast demo should hold prompts of 16 tokens or more"
    c = checks(row)
    assert c["supervised_tokens"]["count"] == len(lost) and c["supervised_tokens"]["ids"] == lost[:10]
    assert f"lost every supervised token to max_length {max_length}" in row["reason"]
    assert c["responses_cut"]["count"] == len(cut) == row["details"]["responses_cut"]
    # The first offender is among the shown examples, with its lost tail marked as cut.
    shown = {e["id"]: e for e in row["details"]["examples"]}
    assert lost[0] in shown
    lost_one = shown[lost[0]]
    assert lost_one["supervised"] == 0 and "no supervised token" in lost_one["flags"]
    assert lost_one["truncated_length"] == max_length
    assert sum(t["role"] == "cut" for t in lost_one["tokens"]) == lost_one["raw_length"] - max_length
    assert "✂(" in lost_one["text"]


def test_inspect_warns_when_responses_are_cut_but_still_supervised(instruct):
    task = instruct_task(tomllib.loads(instruct.session.loaded.text))
    longest = max(lengths(ex)[1] for ex in task.examples)
    row = instruct.run("inspect", {"max_length": longest - 1})
    assert row["verdict"] == "warn", row["reason"]
    assert [n for n, v in verdicts(row).items() if v != "pass"] == ["responses_cut"]
    cut = sum(1 for ex in task.examples if lengths(ex)[1] == longest)
    assert checks(row)["responses_cut"]["count"] == cut
    assert f"{cut} of {len(task.examples)} responses" in row["reason"]


def test_inspect_fails_on_supervised_padding(instruct_wrong):
    row = instruct_wrong.run("inspect")
    assert row["verdict"] == "fail"
    v = verdicts(row)
    assert v["padding_supervised"] == "fail"
    assert v["supervised_tokens"] == v["prompt_supervision"] == "pass"
    # Every example shorter than the longest of its 256-example chunk gets padding labels.
    assert 0 < checks(row)["padding_supervised"]["count"] < row["details"]["examples_scanned"]
    shown = row["details"]["examples"]
    assert any("padding supervised" in e["flags"] for e in shown)
    padded = [t for e in shown for t in e["tokens"] if t["mask"] == 0]
    assert all(t["role"] == "supervised" and t["label"] == 0 for t in padded)


def test_inspect_classification_passes_with_id_to_name(classify):
    row = classify.run("inspect")
    assert row["verdict"] == "pass", row["reason"]
    assert verdicts(row) == dict.fromkeys(
        ("label_range_model", "label_range", "label_meaning", "name_field", "class_names", "class_coverage"),
        "pass",
    )
    task = demo_classify.make_task(**tomllib.loads(classify.session.loaded.text)["task"]["options"])
    counts = collections.Counter(ex["label"] for ex in task.examples)
    d = row["details"]
    assert d["class_counts"] == [
        {"id": k, "name": n, "count": counts[k]} for k, n in enumerate(task.class_names)
    ]
    for shown in d["examples"]:
        assert shown["name"] == shown["meaning"] == task.class_names[shown["label"]]
        assert shown["text"] == f"{shown['label']} -> {shown['name']} (means {shown['meaning']})"


def test_inspect_classification_fails_on_a_name_used_twice_and_warns_on_an_unseen_class(classify_twice):
    row = classify_twice.run("inspect")
    assert row["verdict"] == "fail"
    v = verdicts(row)
    assert v["class_names"] == "fail" and "'circle' twice" in checks(row)["class_names"]["message"]
    assert v["class_coverage"] == "warn" and "class 4 'circle' never appears" in row["reason"]
    assert v["label_range"] == v["label_meaning"] == "pass"


def test_inspect_classification_fails_on_labels_out_of_range(classify_short):
    row = classify_short.run("inspect")
    assert row["verdict"] == "fail"
    v = verdicts(row)
    assert v["label_range"] == "fail" and v["class_names"] == "fail"
    assert v["label_meaning"] == "pass"  # ids 0-2 keep their true names
    task = demo_classify.make_task(**tomllib.loads(classify_short.session.loaded.text)["task"]["options"])
    outside = [ex["id"] for ex in task.examples if ex["label"] >= 3]
    assert checks(row)["label_range"]["count"] == len(outside)
    assert checks(row)["label_range"]["ids"] == outside[:10]


# ------------------------------------------------------------------------------------------ split


def test_split_passes_on_the_runner_splits(instruct):
    row = instruct.run("split")
    assert row["verdict"] == "pass", row["reason"]
    assert set(verdicts(row).values()) == {"pass"}
    raw = tomllib.loads(instruct.session.loaded.text)
    task = instruct_task(raw)
    splits = group_split(task.examples, "conversation", RATIOS, raw["split"]["seed"])
    d = row["details"]
    assert d["sizes"] == {k: len(v) for k, v in splits.items()} == instruct.record()["dataset"]["splits"]
    assert d["groups"] == {k: len({task.examples[i]["conversation"] for i in v}) for k, v in splits.items()}
    assert d["shared_groups_count"] == d["duplicates_count"] == 0


def test_split_fails_on_identical_examples_and_the_tasks_own_groups(instruct_wrong):
    row = instruct_wrong.run("split")
    assert row["verdict"] == "fail"
    v = verdicts(row)
    assert v["groups"] == "pass"  # every id is its own group: the declared key cannot leak
    assert v["task_groups"] == "fail" and v["duplicates"] == "fail"
    raw = tomllib.loads(instruct_wrong.session.loaded.text)
    task = instruct_task(raw)
    splits = group_split(task.examples, "id", RATIOS, raw["split"]["seed"])
    where: dict[Any, set[str]] = collections.defaultdict(set)
    conversations: dict[str, set[str]] = collections.defaultdict(set)
    for name, idx in splits.items():
        for i in idx:
            ex = task.examples[i]
            where[(ex["prompt"], ex["response"])].add(name)
            conversations[ex["conversation"]].add(name)
    d = row["details"]
    assert d["duplicates_count"] == sum(1 for s in where.values() if len(s) > 1) > 0
    assert d["task_shared_groups_count"] == sum(1 for s in conversations.values() if len(s) > 1) > 0
    assert len(d["task_shared_groups"]) == min(10, d["task_shared_groups_count"])
    assert "the task's own unit of leakage ('conversation'" in row["reason"]


def test_split_by_time_period_passes_when_evaluation_comes_after_train(periods):
    row = periods.run("split")
    assert row["verdict"] == "pass", row["reason"]
    order = row["details"]["time_order"]
    assert order["train_last"] < order["validation_first"] <= order["validation_last"] < order["test_first"]


def test_split_by_time_period_warns_when_evaluation_looks_back(periods_ready):
    row = periods_ready.run("split")
    assert row["verdict"] == "warn", row["reason"]
    assert [n for n, v in verdicts(row).items() if v != "pass"] == ["time_order"]
    order = row["details"]["time_order"]
    assert order["validation_first"] <= order["train_last"]
    assert row["details"]["source"] == "field"


# ------------------------------------------------------------------------------------------ overfit


def test_overfit_passes_on_the_demo_and_leaves_the_rng_alone(instruct):
    row = instruct.run("overfit")
    assert row["verdict"] == "pass", row["reason"]
    progress = [ev for ev in instruct.events if isinstance(ev, PhaseProgress)]
    assert progress and progress[-1].done == progress[-1].total == row["details"]["steps"]
    d = row["details"]
    spec = tomllib.loads(instruct.session.loaded.text)["overfit"]
    assert d["examples"] == spec["examples"] and d["steps"] <= spec["max_steps"]
    assert d["final_loss"] < spec["loss_below"] and d["recovered"] == 1.0 and d["hits"] == d["targets"]
    assert len(d["loss_curve"]) == d["steps"] and d["loss_curve"][0] > d["loss_curve"][-1]
    assert d["pairs"] and all(p["expected"] == p["predicted"] and p["ok"] for p in d["pairs"])
    # A fresh model with the same seed: a second, shorter run starts on the same curve, and fails.
    short = instruct.run("overfit", {"overfit_max_steps": 3})
    assert short["verdict"] == "fail"
    assert short["details"]["loss_curve"] == d["loss_curve"][:3]
    assert short["details"]["recovered"] < 1.0
    assert "a long rental will not fix this" in short["reason"]
    assert any(not p["ok"] for p in short["details"]["pairs"])


def test_overfit_fails_at_the_first_non_finite_loss(instruct):
    row = instruct.run("overfit", {"overfit_lr": 1e6, "overfit_max_steps": 20})
    assert row["verdict"] == "fail"
    step = row["details"]["steps"]
    assert f"non-finite loss at overfit step {step}" in row["reason"]
    assert "a long rental will not fix this" in row["reason"]
    assert 1 <= step < 20 and len(row["details"]["loss_curve"]) == step - 1


def test_overfit_passes_on_classification(classify):
    row = classify.run("overfit")
    assert row["verdict"] == "pass", row["reason"]
    names = list(demo_classify.CLASS_NAMES)
    for p in row["details"]["pairs"]:
        k, name = p["expected"].split(" ", 1)
        assert names[int(k)] == name and p["predicted"] == p["expected"]


# ------------------------------------------------------------------------------------------ broken demos

BROKEN = {
    "broken-unmasked-prompt": ("inspect", "prompt_supervision"),
    "broken-all-masked": ("inspect", "supervised_tokens"),
    "broken-truncated": ("inspect", "supervised_tokens"),
    "broken-shuffled-classes": ("inspect", "label_meaning"),
    "broken-leaking-split": ("split", "groups"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_broken_campaign_fails_exactly_its_gate(name, tmp_path_factory):
    gate, check = BROKEN[name]
    path = CAMPAIGNS / f"{name}.toml"
    assert path.read_text().startswith("# BROKEN ON PURPOSE"), "say what is wrong at the top"
    with pilot_for(tmp_path_factory, name, path) as pilot:
        keys = [s.key for s in pilot.session.steps if s.phase in in_group("data")]
        rows = {key: pilot.run(key) for key in keys}
        failed = [key for key, row in rows.items() if row["verdict"] == "fail"]
        assert failed == [gate], {k: r["reason"] for k, r in rows.items()}
        assert verdicts(rows[gate])[check] == "fail"
        if name == "broken-unmasked-prompt":
            # Skipped in the campaign, and the file says why. Four examples are enough to show it:
            # after <bos> the prompt's first letter ("rev", "sort", "up") cannot be predicted,
            # however long the loop runs — the gate counts those targets as unrecoverable and
            # judges the loop against what the subset allows, not against 100 %.
            assert "overfit" not in rows
            row = pilot.run("overfit", {"overfit_examples": 4, "overfit_max_steps": 40})
            d = row["details"]
            assert d["recovered"] < 1.0 and d["ambiguous_targets"] > 0 and d["achievable_recovery"] < 1.0
            assert d["recovered"] >= d["recover_needed"] or row["verdict"] == "fail"
