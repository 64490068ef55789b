"""Safe loading and provenance (R17): a malicious pickle never runs, a tampered file is refused."""

from __future__ import annotations

import ast
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import pilot_tui
from pilot_tui.core.hashing import artifact_entry, sha256_file
from pilot_tui.core.spec import load_spec
from pilot_tui.runner.context import RunContext
from pilot_tui.runner.loop.checkpoint import (
    export_weights,
    load_training_state,
    load_weights,
    save_training_state,
)
from pilot_tui.runner.processes.fresh_process import EXIT_REFUSED, read_tensors
from pilot_tui.runner.safe_load import (
    UnsafeLoadError,
    check_torch_version,
    load_checkpoint,
    load_tensors,
    verify_provenance,
)
from pilot_tui.tasks.loader import load_task

PACKAGE = Path(pilot_tui.__file__).resolve().parent


class Payload:
    """Unpickling this object runs code: it creates the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


@pytest.fixture
def evil(tmp_path: Path) -> dict[str, Path]:
    """Two malicious files (torch zip format and a plain pickle) and the marker they would create."""
    marker = tmp_path / "MARKER-code-ran"
    zipped, plain = tmp_path / "evil.pt", tmp_path / "evil.pkl"
    torch.save({"model": {"w": torch.zeros(2)}, "step": Payload(marker)}, zipped)
    with plain.open("wb") as fh:
        pickle.dump({"step": Payload(marker)}, fh)
    return {"marker": marker, "zip": zipped, "plain": plain}


def _entry(path: Path) -> dict:
    # The attacker also controls the record here: the hash matches, so only the content rule is left.
    return artifact_entry(path, "training_checkpoint")


def test_the_payload_really_runs_code_when_unpickled(evil, tmp_path):
    # Proves the fixture is live: an unsafe load would create the marker.
    with evil["plain"].open("rb") as fh:
        pickle.load(fh)
    assert evil["marker"].exists()


@pytest.mark.parametrize("kind", ["zip", "plain"])
def test_every_in_process_load_path_refuses_a_malicious_pickle(evil, kind):
    path = evil[kind]
    entry = _entry(path)
    loaders = [
        lambda: load_checkpoint(path, entry),
        lambda: load_training_state(path, entry),
        lambda: load_weights(path, entry),
        lambda: load_tensors(path, entry),
        lambda: read_tensors({"tensors": entry}),
    ]
    for load in loaders:
        with pytest.raises(UnsafeLoadError, match="refused"):
            load()
    assert not evil["marker"].exists()


def test_the_refusal_names_the_unsafe_global_and_never_advises_unpickling(evil):
    with pytest.raises(UnsafeLoadError) as info:
        load_checkpoint(evil["zip"], _entry(evil["zip"]))
    message = str(info.value)
    assert "exec" in message and "weights_only" not in message and "\n" not in message


def test_fresh_processes_refuse_a_malicious_checkpoint_and_artifact(evil, write_campaign, tmp_path):
    spec_path = write_campaign()
    loaded = load_spec(spec_path)
    ctx = RunContext(loaded, load_task(loaded), torch.device("cpu"), lambda _m: None, tmp_path)
    common = ["--spec", str(spec_path), "--spec-sha256", loaded.sha256, "--threads", "1"]
    sha = sha256_file(evil["zip"])
    resume = [
        "pilot_tui.runner.workers.resume",
        *common,
        *("--out", str(tmp_path / "w1"), "--checkpoint", str(evil["zip"]), "--sha256", sha),
        *("--config", json.dumps(ctx.config().params()), "--updates", "1"),
    ]
    reload = [
        "pilot_tui.runner.workers.reload",
        *common,
        *("--out", str(tmp_path / "w2"), "--artifact", str(evil["zip"]), "--sha256", sha),
    ]
    # Both at once: each pays the torch import.
    procs = [
        subprocess.Popen([sys.executable, "-m", *cmd], stderr=subprocess.PIPE, text=True)
        for cmd in (resume, reload)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == EXIT_REFUSED, err
        assert "refused" in err.splitlines()[-1]
    assert not evil["marker"].exists()


def _flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_tampered_checkpoint_and_export_are_refused_by_hash(write_campaign, tmp_path):
    loaded = load_spec(write_campaign())
    ctx = RunContext(loaded, load_task(loaded), torch.device("cpu"), lambda _m: None, tmp_path)
    state = ctx.state("control")
    ckpt, weights = tmp_path / "ckpt.pt", tmp_path / "model.safetensors"
    save_training_state(state, ckpt)
    export_weights(state.model, weights)
    ckpt_entry = artifact_entry(ckpt, "training_checkpoint")
    weights_entry = artifact_entry(weights, "inference_weights")
    assert load_training_state(ckpt, ckpt_entry)["step"] == 0  # untouched: loads
    assert set(load_weights(weights, weights_entry)) == set(state.model.state_dict())
    for path, entry, load in (
        (ckpt, ckpt_entry, load_training_state),
        (weights, weights_entry, load_weights),
    ):
        _flip_one_byte(path)
        assert path.stat().st_size == entry["size"]  # same size: only the hash can tell
        with pytest.raises(UnsafeLoadError, match=r"sha256 .* differs from the recorded"):
            load(path, entry)


def test_provenance_must_name_the_file_and_its_hash(tmp_path):
    f = tmp_path / "a.bin"
    f.write_bytes(b"abc")
    entry = artifact_entry(f, "x")
    assert verify_provenance(f, entry) == f
    with pytest.raises(UnsafeLoadError, match="unknown provenance"):
        verify_provenance(f, {"path": str(f)})
    with pytest.raises(UnsafeLoadError, match="provenance is for"):
        verify_provenance(f, entry | {"path": str(tmp_path / "other.bin")})
    with pytest.raises(UnsafeLoadError, match="size"):
        verify_provenance(f, entry | {"size": 4})
    with pytest.raises(UnsafeLoadError, match="not found"):
        verify_provenance(tmp_path / "gone.bin", entry | {"path": str(tmp_path / "gone.bin")})


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("2.5.1", False),
        ("1.13.0", False),
        ("2.6.0", True),
        ("2.13.0+cpu", True),
        ("3.0.0a0", True),
        ("dev", False),
    ],
)
def test_torch_older_than_2_6_is_refused_for_loading(version, ok):
    if ok:
        check_torch_version(version)
    else:
        with pytest.raises(UnsafeLoadError, match=r"older than 2\.6"):
            check_torch_version(version)


def _loads(tree: ast.AST) -> list[int]:
    """Lines of calls that deserialise: torch.load, pickle.load(s), load_file, safe_open, or any
    call passing weights_only=False."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
        unsafe_kw = any(
            k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is False
            for k in node.keywords
        )
        if (
            (owner == "torch" and name == "load")
            or (owner in ("pickle", "cPickle", "dill") and name in ("load", "loads"))
            or name in ("load_file", "safe_open", "Unpickler")
            or unsafe_kw
        ):
            lines.append(node.lineno)
    return lines


def test_no_load_path_bypasses_safe_load():
    """Every deserialisation in the package goes through safe_load.py (the load paths tested above)."""
    offenders = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in PACKAGE.rglob("*.py")
        if path.name != "safe_load.py"
        for line in _loads(ast.parse(path.read_text()))
    ]
    assert offenders == []
    assert _loads(ast.parse((PACKAGE / "runner" / "safe_load.py").read_text()))  # the detector works
