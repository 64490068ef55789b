"""Faults end in a row that names them (R10, R24), on real torch and real files, in process.

The runner's own open path builds the contexts, so no runner process is started here: a "new
runner" is a second context opened with the rows recorded so far, as the session sends them.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import tomli_w
import torch
from conftest import CAMPAIGNS, tmpfs

from pilot_tui.core import phase_table
from pilot_tui.core.events import OpenCampaign
from pilot_tui.core.phase_table import PhaseInfo
from pilot_tui.core.steps import Step
from pilot_tui.runner.main import Channel, open_campaign
from pilot_tui.runner.memory.faults import is_cpu_oom, is_disk_full
from pilot_tui.runner.phases import execute
from pilot_tui.runner.phases.base import PHASES, phase
from pilot_tui.session.death import death_reason, oom_kills


def example_campaign(folder: Path) -> Path:
    """The shipped example (a user task file), copied so the test may edit its task file."""
    for name in ("example.toml", "example_task.py"):
        shutil.copy(CAMPAIGNS / name, folder / name)
    return folder / "example.toml"


def open_ctx(spec: Path, work_dir: Path, rows: list[dict] | None = None):
    ctx = open_campaign(
        OpenCampaign(spec_path=str(spec), work_dir=str(work_dir), rows=list(rows or [])),
        Channel(io.StringIO()).emit,
        threading.Event(),
    )
    assert ctx is not None
    return ctx


def run(ctx, key: str) -> dict:
    phase_name, _, variant = key.partition("@")
    return execute(ctx, Step(key=key, phase=phase_name, variant=variant or "control"), {})


def test_final_in_a_new_runner_reads_the_export_back_and_refuses_an_edited_task_file(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    spec = example_campaign(tmp_path)
    first = open_ctx(spec, tmp_path / "work")
    export = run(first, "export")
    assert export["verdict"] == "pass", export["reason"]
    assert export["details"]["replay_file"]["kind"] == "replay_outputs"
    # The runner died between the steps: a new one gets the recorded rows, not the memory.
    second = open_ctx(spec, tmp_path / "work", rows=first.rows)
    assert "replay_outputs" not in second.memo
    final = run(second, "final")
    assert final["verdict"] in ("pass", "warn"), final["reason"]
    assert final["details"]["replays"] and all(c["same"] for c in final["details"]["replays"])
    # The task file edited while the campaign runs: the fresh process refuses it, saying so.
    task = tmp_path / "example_task.py"
    task.write_text(task.read_text() + "\n# edited\n")
    final = run(second, "final")
    assert final["verdict"] == "fail"
    assert "the task file changed since the runner imported it" in final["reason"], final["reason"]


def test_an_export_row_written_before_the_replay_rename_still_gives_final_its_comparison(
    tmp_path, monkeypatch
):
    """Everything written when `[replay]` was `[control]`: the campaign's section, the task file's
    `encode_control`, `controls_file` in the export row and `controls` in the file's metadata.
    A new runner on such rows still compares."""
    from safetensors.torch import load_file, save_file

    from pilot_tui.core.hashing import artifact_entry
    from pilot_tui.runner.safe_load import load_tensors_and_metadata

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    spec = example_campaign(tmp_path)
    spec.write_text(spec.read_text().replace("[replay]", "[control]"))
    task = tmp_path / "example_task.py"
    task.write_text(task.read_text().replace("encode_replay=", "encode_control="))
    first = open_ctx(spec, tmp_path / "work")
    assert first.spec.replay.inputs and first.task.encode_replay is not None
    export = run(first, "export")
    new = export["details"].pop("replay_file")
    _, meta = load_tensors_and_metadata(new["path"], new)
    old_path = Path(new["path"]).with_name("controls-old.safetensors")
    save_file(load_file(new["path"]), old_path, metadata={"controls": meta["replays"]})
    extra = {k: new[k] for k in ("phase", "variant", "step", "of")}
    export["details"]["controls_file"] = artifact_entry(old_path, "control_outputs", **extra)
    assert first.rows[-1] is export and "replay_file" not in first.rows[-1]["details"]
    second = open_ctx(spec, tmp_path / "work", rows=first.rows)
    final = run(second, "final")
    assert final["verdict"] in ("pass", "warn"), final["reason"]
    replays = final["details"]["replays"]
    assert [c["input"] for c in replays] == second.spec.replay.inputs and all(c["same"] for c in replays)


def test_cpu_out_of_memory_is_named_with_its_input(tmp_path):
    def cpu_oom(ctx, run):
        torch.empty(1 << 60, dtype=torch.uint8)  # a real allocation the host cannot satisfy

    ctx = open_ctx(example_campaign(tmp_path), tmp_path / "work")
    phase_table.register(
        PhaseInfo("test_cpu_oom", "engine", "allocates more than the host has", "docs/engine.md")
    )
    try:
        phase("test_cpu_oom")(cpu_oom)
        row = run(ctx, "test_cpu_oom")
    finally:
        phase_table.unregister("test_cpu_oom")
        PHASES.pop("test_cpu_oom", None)
    assert row["verdict"] == "fail"
    assert row["reason"].startswith("out of memory (host memory) in test_cpu_oom on input microbatch 8"), row[
        "reason"
    ]
    assert "DefaultCPUAllocator" in row["details"]["error"]


def test_a_checkpoint_save_on_a_full_disk_says_disk_full(tmp_path):
    # torch's own error for a short write (`unexpected pos`), from a real write to /dev/full.
    with pytest.raises(RuntimeError) as info:
        torch.save({"w": torch.zeros(100_000)}, "/dev/full")
    assert "unexpected pos" in str(info.value)
    assert is_disk_full(info.value)
    assert not is_disk_full(RuntimeError("shape mismatch"))
    with pytest.raises(OSError) as full, open("/dev/full", "w") as fh:
        fh.write("x" * 10_000)
    assert is_disk_full(full.value)
    assert is_cpu_oom(MemoryError()) and not is_cpu_oom(ValueError("x"))


def test_a_process_killed_by_signal_9_is_explained(tmp_path):
    proc = subprocess.Popen(["sleep", "30"])
    proc.kill()
    code = proc.wait()
    before = oom_kills()
    status = f"signal {-code}"  # as the runner link words it
    reason = death_reason(status, "steady", before, 812.0)
    assert "signal 9 (SIGKILL)" in reason and "OOM killer if memory ran out, or from outside" in reason
    assert "812 MiB" in reason
    if before is not None:
        # A rise of the cgroup's OOM-kill count names the killer outright.
        assert death_reason(status, "steady", before - 1).startswith(
            "out of memory (host): the kernel's OOM killer"
        )
    assert "exit code 3" in death_reason("exit code 3", "load", None)


def test_stale_temp_files_are_swept_in_worker_folders(tmp_path):
    from pilot_tui.session.driver import sweep_stale_temp_files

    dead = subprocess.Popen(["true"])
    dead.wait()
    deep = tmp_path / "demo-1" / "resume-control.worker" / "out"
    deep.mkdir(parents=True)
    stale = deep / f".result.json.{dead.pid}.abc123.tmp"
    live = deep / f".result.json.{os.getpid()}.abc123.tmp"
    for f in (stale, live):
        f.write_text("{}")
    assert sweep_stale_temp_files(tmp_path) == [stale]
    assert live.exists() and not stale.exists()


def test_options_device_and_split_field_errors_name_the_file_and_key(tmp_path):
    from pilot_tui.runner.main import Channel

    spec = example_campaign(tmp_path)
    base = spec.read_text()
    cases = {
        "options = { n_sheets = 60, per_sheet = 4, seed = 0 }": (
            "options = { n_sheets = 60, per_sheet = 4, seed = 0, colour = 1 }",
            "task.options in",
        ),
        'device = "auto"': ('device = "cuda"', "batch.device"),
        "seed = 0\n\n[batch]": ('seed = 0\nfield = "no_such_field"\n\n[batch]', "split.field"),
    }
    for old, (new, key) in cases.items():
        if key == "batch.device" and torch.cuda.is_available():
            continue  # a GPU is there: cuda is a valid choice
        assert old in base, old
        spec.write_text(base.replace(old, new))
        out = io.StringIO()
        ctx = open_campaign(
            OpenCampaign(spec_path=str(spec), work_dir=str(tmp_path / "w")),
            Channel(out).emit,
            threading.Event(),
        )
        assert ctx is None
        # What the runner says while it opens (events.Opening) precedes its one answer.
        answer = [e for e in out.getvalue().strip().splitlines() if '"kind": "opening"' not in e]
        assert len(answer) == 1 and '"bad_input"' in answer[0], answer
        line = answer[0]
        assert str(spec) in line and key in line, line
    assert not (tmp_path / "w").exists()


def test_limits_must_name_a_phase(tmp_path):
    from pilot_tui.core.spec import SpecError, parse_spec

    raw = tomli_w.dumps(
        {
            **__import__("tomllib").loads((CAMPAIGNS / "demo.toml").read_text()),
            "limits": {"stedy": {"time_s": 5}},
        }
    )
    with pytest.raises(SpecError) as info:
        parse_spec(raw, tmp_path / "c.toml")
    assert "limits.stedy: unknown phase (did you mean 'steady'?" in str(info.value)


def test_a_task_with_unusable_examples_is_bad_input_not_a_hang(tmp_path):
    """examples = None / ints / a generator: the runner answers bad_input, never only an error."""
    spec = example_campaign(tmp_path)
    (tmp_path / "odd_task.py").write_text(
        "import dataclasses, example_task\n"
        "def make_task(kind, **options):\n"
        "    task = example_task.make_task(**options)\n"
        "    examples = {'none': None, 'ints': [1, 2, 3], 'gen': (e for e in task.examples)}[kind]\n"
        "    return dataclasses.replace(task, examples=examples)\n"
    )
    base = spec.read_text().replace('file = "example_task.py"', 'file = "odd_task.py"')
    for kind in ("none", "ints", "gen"):
        spec.write_text(base.replace("seed = 0 }", f'seed = 0, kind = "{kind}" }}', 1))
        out = io.StringIO()
        with pytest.MonkeyPatch.context() as mp:
            mp.syspath_prepend(str(tmp_path))
            ctx = open_campaign(
                OpenCampaign(spec_path=str(spec), work_dir=str(tmp_path / "w")),
                Channel(out).emit,
                threading.Event(),
            )
        assert ctx is None
        events = [e for e in out.getvalue().strip().splitlines() if '"kind": "opening"' not in e]
        assert len(events) == 1 and '"bad_input"' in events[0], (kind, events)
        assert str(spec) in events[0] or "odd_task.py" in events[0], events[0]


def test_a_checkpoint_save_that_fills_the_disk_fails_its_row_saying_so(tmp_path):
    """A real small file system when this user may mount one, else /dev/full's answer."""
    work = tmp_path / "work"
    with tmpfs(work, "size=32k") as mounted:
        ctx = open_ctx(example_campaign(tmp_path), work)
        if not mounted:
            pytest.skip("no small file system can be mounted here (not root)")
        row = run(ctx, "save")
    assert row["verdict"] == "fail"
    assert row["reason"].startswith(f"disk full: no space left on the device of {work}"), row["reason"]
    assert "while save was writing" in row["reason"]
