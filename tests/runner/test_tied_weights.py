"""A custom model with tied weights, from a task file that imports its sibling module, resumes
bitwise in a new process (the resume worker once refused to write tensors that share memory;
the export and the final reload of tied weights are covered by the HF tied-embeddings campaign)."""

from __future__ import annotations

import os
import tomllib

import tomli_w
from conftest import FAST, REPO, deep_merge, demo_raw

from pilot_tui.runner.in_process import InProcessLink
from pilot_tui.session.driver import Session

TIED = REPO / "tests" / "data" / "tied"


def test_tied_weights_resume_bitwise_and_reload(tmp_path, monkeypatch):
    raw = deep_merge(demo_raw(), FAST)
    raw["task"] = {"file": str(TIED / "task.py"), "group_key": "conversation"}
    raw = deep_merge(raw, {"batch": {"microbatch": 4, "accumulation": 2}, "resume": {"k": 3, "n": 3}})
    raw.pop("variants", None)
    spec = tmp_path / "campaign.toml"
    spec.write_text(tomli_w.dumps(raw))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.chdir(tmp_path)  # not the task's folder: the sibling import must work anyway
    assert str(TIED) not in os.environ.get("PYTHONPATH", "")
    session = Session(spec, tmp_path / "records", link=InProcessLink())
    try:
        session.start()
        for key in ("load", "resume"):
            for _ in session.run_step(key):
                pass
    finally:
        session.close()
    rows = {r["step"]: r for r in tomllib.loads(session.record.path.read_text())["phases"]}
    assert all(r["verdict"] == "pass" for r in rows.values()), {k: r["reason"] for k, r in rows.items()}
    assert rows["resume"]["details"]["comparison"] == "bitwise"
    assert rows["resume"]["details"]["checks"]
