"""`pilot-tui archive RECORD`: the archive of a pilot (R16), on real record files."""

from __future__ import annotations

import hashlib
import json
import tarfile
import tomllib
from pathlib import Path

import pytest

from pilot_tui.commands.archive import ArchiveError, write_archive
from pilot_tui.commands.cli import main
from pilot_tui.core.hashing import artifact_entry
from pilot_tui.core.record import Record, RecordError

SPEC_TEXT = (
    '[campaign]\nname = "demo"\n\n[task]\nfile = "my_task.py"\n\n[batch]\nmicrobatch = 2\nupdates = 5\n'
)


@pytest.fixture
def record(tmp_path: Path) -> Record:
    """A finished record with two artifacts on disk and a user task file beside its spec."""
    spec_dir = tmp_path / "campaigns"
    spec_dir.mkdir()
    (spec_dir / "demo.toml").write_text(SPEC_TEXT)
    (spec_dir / "my_task.py").write_text("def make_task():\n    ...\n")
    task_sha = hashlib.sha256((spec_dir / "my_task.py").read_bytes()).hexdigest()
    rec = Record.create(
        tmp_path / "records",
        record_id="20250101-000000-abcd",
        name="demo",
        spec_path=spec_dir / "demo.toml",
        spec_text=SPEC_TEXT,
        spec_sha256="0" * 64,
        spec_raw=tomllib.loads(SPEC_TEXT),
        environment={
            "python": "3.11.7",
            "torch": "2.13.0+cpu",
            "cuda": "",
            "device": "cpu",
            "pilot_tui": "0.1.0",
        },
        accounting={"effective_batch": 2},
        dataset={"examples": 10},
    )
    # As the session writes it: the task file's path and hash when the campaign opened.
    rec.data["campaign"]["task_file"] = {"path": str(spec_dir / "my_task.py"), "sha256": task_sha}
    work = rec.path.parent / rec.path.stem
    work.mkdir(parents=True)
    for name, kind in (("model.safetensors", "inference_weights"), ("ckpt.pt", "training_checkpoint")):
        (work / name).write_bytes(name.encode() * 100)
        rec.append("artifacts", artifact_entry(work / name, kind, phase="export", variant="control", step=5))
    rec.append(
        "phases",
        {
            "name": "resume",
            "step": "resume",
            "verdict": "pass",
            "reason": "all checks passed",
            "details": {"checks": {"loss_per_step": {"ok": True, "max_abs_diff": 0.0}}},
        },
    )
    rec.append("phases", {"name": "final", "step": "final", "verdict": "fail", "reason": "a | b"})
    rec.save()
    return rec


def test_folder_archive_holds_record_spec_metrics_manifest_and_instructions(record, tmp_path):
    out = write_archive(record.path, tmp_path / "arch")
    assert out == tmp_path / "arch"
    assert (out / "record.toml").read_bytes() == record.path.read_bytes()
    assert (out / "campaign.toml").read_text() == SPEC_TEXT
    assert (out / "my_task.py").is_file()  # the task the spec names, beside it as the spec expects
    metrics = json.loads((out / "metrics.json").read_text())
    assert [p["step"] for p in metrics["phases"]] == ["resume", "final"]
    assert metrics["phases"][0]["details"]["checks"]["loss_per_step"]["max_abs_diff"] == 0.0
    manifest = tomllib.loads((out / "manifest.toml").read_text())["artifacts"]
    assert [m["kind"] for m in manifest] == ["inference_weights", "training_checkpoint"]
    assert all(m["state"] == "verified" and len(m["sha256"]) == 64 and m["size"] > 0 for m in manifest)
    assert not (out / "artifacts").exists()  # only with --with-artifacts
    text = (out / "INSTRUCTIONS.md").read_text()
    for needle in (
        "3.11.7",
        "2.13.0+cpu",
        'pip install "torch==2.13.0"',
        "pilot-tui run",
        "| final | fail | a \\| b |",
    ):
        assert needle in text, needle


def test_with_artifacts_copies_only_files_that_match_their_hash(record, tmp_path):
    tampered = Path(record.data["artifacts"][1]["path"])
    tampered.write_bytes(b"X" + tampered.read_bytes()[1:])
    out = write_archive(record.path, tmp_path / "arch", with_artifacts=True)
    manifest = tomllib.loads((out / "manifest.toml").read_text())["artifacts"]
    assert manifest[0]["state"] == "verified" and manifest[0]["archived_as"] == "artifacts/model.safetensors"
    assert manifest[1]["state"].startswith("changed") and "archived_as" not in manifest[1]
    assert sorted(p.name for p in (out / "artifacts").iterdir()) == ["SHA256SUMS", "model.safetensors"]
    assert (out / "artifacts" / "SHA256SUMS").read_text() == f"{manifest[0]['sha256']}  model.safetensors\n"


def test_tar_gz_archive(record, tmp_path):
    out = write_archive(record.path, tmp_path / "pilot.tar.gz", with_artifacts=True)
    with tarfile.open(out) as tar:
        names = set(tar.getnames())
    assert {"pilot/record.toml", "pilot/INSTRUCTIONS.md", "pilot/artifacts/ckpt.pt"} <= names
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left


def test_default_archive_sits_beside_the_record_and_is_never_overwritten(record):
    out = write_archive(record.path)
    assert out == record.path.with_name(f"{record.path.stem}-archive") and out.is_dir()
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(ArchiveError, match="already exists"):
        write_archive(record.path)
    assert sorted(p.name for p in out.iterdir()) == before


def test_missing_or_invalid_record_is_bad_input_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("this is [not toml")
    for path in (tmp_path / "nope.toml", bad):
        with pytest.raises(RecordError):
            write_archive(path)
        assert main(["archive", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(path) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]  # nothing written


def test_cli_archive_prints_the_archive_path(record, tmp_path, capsys):
    assert main(["archive", str(record.path), "--out", str(tmp_path / "x.tar.gz")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "x.tar.gz")


def test_export_is_the_old_name_of_archive_and_says_so(record, tmp_path, capsys):
    assert main(["export", str(record.path), "--out", str(tmp_path / "old")]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(tmp_path / "old") and (tmp_path / "old" / "record.toml").is_file()
    assert "old name of 'archive'" in err


def test_artifacts_outside_the_record_folder_are_never_read(record, tmp_path):
    """Absolute paths, `..` and symlinks out of the folder: refused before any read or stat."""
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"private key")
    link = record.path.parent / record.path.stem / "innocent.bin"
    link.symlink_to(secret)
    for path in (str(secret), f"../{secret.name}", str(link), "/nonexistent/file"):
        record.append("artifacts", artifact_entry(secret, "inference_weights") | {"path": path})
    record.save()
    out = write_archive(record.path, tmp_path / "arch", with_artifacts=True)
    manifest = tomllib.loads((out / "manifest.toml").read_text())["artifacts"]
    states = [m["state"] for m in manifest]
    assert states[:2] == ["verified", "verified"]
    # Same state whether the outside file exists or not: nothing is told about it.
    assert states[2:] == ["outside the record's folder (not read)"] * 4
    archived = sorted(p.name for p in (out / "artifacts").iterdir())
    assert archived == ["SHA256SUMS", "ckpt.pt", "model.safetensors"]
    assert b"private key" not in b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())


def test_a_crafted_spec_path_cannot_pull_in_another_file(record, tmp_path):
    """`spec_path` elsewhere + `task.file = "id_rsa"`: not a hashed .py task file, not archived."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "id_rsa").write_text("-----BEGIN PRIVATE KEY-----")
    record.data["campaign"]["spec_path"] = str(home / "campaign.toml")
    record.data["campaign"]["spec"]["task"]["file"] = "id_rsa"
    record.data["campaign"]["task_file"] = {"path": str(home / "id_rsa"), "sha256": "0" * 64}
    record.save()
    out = write_archive(record.path, tmp_path / "arch", with_artifacts=True)
    assert not (out / "id_rsa").exists()
    assert "PRIVATE KEY" not in "".join(p.read_text() for p in out.rglob("*") if p.is_file())
    assert "not a .py file" in tomllib.loads((out / "manifest.toml").read_text())["task_file"]["state"]


def test_an_edited_task_file_is_reported_not_archived(record, tmp_path, capsys):
    task = Path(record.data["campaign"]["task_file"]["path"])
    assert write_archive(record.path, tmp_path / "a1").joinpath("my_task.py").is_file()
    task.write_text("import os\nos.system('echo edited')\n")
    assert main(["archive", str(record.path), "--out", str(tmp_path / "a2")]) == 0
    assert not (tmp_path / "a2" / "my_task.py").exists()
    err = capsys.readouterr().err
    assert "changed since the run" in err and err.count("\n") == 1
    state = tomllib.loads((tmp_path / "a2" / "manifest.toml").read_text())["task_file"]["state"]
    assert "changed since the run" in state
    assert "changed since the run" in (tmp_path / "a2" / "INSTRUCTIONS.md").read_text()


def test_a_sharded_checkpoint_directory_is_archived_whole_when_every_file_matches(record, tmp_path):
    shards = record.path.parent / record.path.stem / "checkpoint-control-step5.dcp"
    shards.mkdir()
    for name in (".metadata", "__0_0.distcp", "__1_0.distcp", "rank0.pt", "rank1.pt"):
        (shards / name).write_bytes(name.encode() * 50)
    record.append("artifacts", artifact_entry(shards, "training_checkpoint", phase="save", variant="control"))
    record.save()
    out = write_archive(record.path, tmp_path / "arch", with_artifacts=True)
    manifest = tomllib.loads((out / "manifest.toml").read_text())["artifacts"]
    entry = next(m for m in manifest if m["path"] == str(shards))
    assert entry["state"] == "verified" and entry["archived_as"] == "artifacts/checkpoint-control-step5.dcp"
    sums = (out / "artifacts" / "SHA256SUMS").read_text().splitlines()
    # sha256sum -c checks files: one line per file of the directory.
    inside = [ln for ln in sums if "checkpoint-control-step5.dcp/" in ln]
    assert len(inside) == 5
    for line in inside:
        digest, name = line.split("  ")
        assert hashlib.sha256((out / "artifacts" / name).read_bytes()).hexdigest() == digest
    # Its twin with one shard changed is reported, never archived.
    (shards / "__1_0.distcp").write_bytes(b"changed")
    out2 = write_archive(record.path, tmp_path / "arch2", with_artifacts=True)
    entry2 = next(
        m
        for m in tomllib.loads((out2 / "manifest.toml").read_text())["artifacts"]
        if m["path"] == str(shards)
    )
    assert entry2["state"].startswith("changed") and not (out2 / "artifacts" / shards.name).exists()
