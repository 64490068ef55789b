"""`pilot-tui archive RECORD`: everything needed to re-read and reproduce a pilot (R16, R20).

Pure (no torch). The archive is a folder, or a `.tar.gz` when `--out` ends with it:

    record.toml        the campaign record, byte for byte
    campaign.toml      the campaign spec as the user wrote it (the record's `spec_text`)
    <task file>        the user's task file, when the spec names one beside it
    metrics.json       raw metrics: every phase row (params, memory, details), runs, variants
    manifest.toml      every artifact: path, kind, size, sha256, and its state now
    artifacts/         the artifacts themselves, with --with-artifacts (+ SHA256SUMS)
    INSTRUCTIONS.md    commands and versions to reproduce the pilot

It is built in a temporary folder beside the target and moved into place at the end, so a
failure leaves nothing half-written.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from .. import __version__
from ..core.atomic import TEMP_SUFFIX, temp_prefix
from ..core.hashing import directory_files, directory_sha256, sha256_file
from ..core.record import Record, RecordError, dumps
from ..core.revision import code_revision


class ArchiveError(RecordError):
    """The archive cannot be written as asked; one line, exit code 2."""


def _is_tar(out: Path) -> bool:
    return out.name.endswith((".tar.gz", ".tgz"))


def _stem(out: Path) -> str:
    name = out.name
    for suffix in (".tar.gz", ".tgz"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


OUTSIDE = "outside the record's folder (not read)"


def inside(path: Path, folder: Path) -> Path | None:
    """`path` resolved (symlinks followed), when that lies inside `folder`; else None.

    A crafted record can name any file (`/etc/passwd`, `../../id_rsa`, a symlink to one): only
    what really lies in the record's own folder is ever opened (R24). Nothing outside is even
    stat'ed, so the manifest cannot tell whether an outside file exists.
    """
    try:
        resolved = path.resolve()
        root = folder.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return None
    return resolved if resolved.is_relative_to(root) else None


def _artifact_path(record: Record, art: dict[str, Any]) -> Path | None:
    """Where an artifact is now, confined to the record's folder (None: outside it)."""
    base = record.path.parent
    path = Path(str(art.get("path", "")))
    if not path.is_absolute():
        path = base / path
    here = inside(path, base)
    if here is None or not here.is_file():
        # The record's folder was moved with its artifacts folder (`<record stem>/` beside it).
        moved = inside(base / record.path.stem / path.name, base)
        if moved is not None and moved.is_file():
            return moved
    return here


def _directory_state(
    path: Path, art: dict[str, Any], dest: Path | None, used: set[str], entry: dict[str, Any]
) -> str:
    digest, size, _ = directory_sha256(path)
    if size != art.get("size") or digest != art.get("sha256"):
        return "changed since recorded (not archived)"
    if dest is not None:
        name = path.name
        while name in used:
            name = f"{path.stem}_{len(used)}{path.suffix}"
        used.add(name)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copytree(path, dest / name)
        if directory_sha256(dest / name)[0] != digest:
            raise ArchiveError(f"{path}: the copy does not match its sha256 (disk error?)")
        entry["archived_as"] = f"artifacts/{name}"
    return "verified"


def _sums(artifacts: Path, name: str, entry: dict[str, Any]) -> str:
    """SHA256SUMS lines: the file's, or one per file of a directory (sha256sum checks files)."""
    here = artifacts / name
    if not here.is_dir():
        return f"{entry['sha256']}  {name}\n"
    return "".join(
        f"{sha256_file(f)}  {name}/{f.relative_to(here).as_posix()}\n" for f in directory_files(here)
    )


def _manifest(record: Record, dest: Path | None) -> list[dict[str, Any]]:
    """Each artifact with its state now; copy the verified ones into `dest` when given."""
    rows = []
    used: set[str] = set()
    for art in record.data.get("artifacts", []):
        entry = {
            k: art[k] for k in ("path", "kind", "size", "sha256", "phase", "variant", "step") if k in art
        }
        path = _artifact_path(record, art)
        if path is None:
            entry["state"] = OUTSIDE
        elif path.is_dir():
            # A sharded checkpoint: one recorded hash over every file of the directory.
            entry["state"] = _directory_state(path, art, dest, used, entry)
        elif not path.is_file():
            entry["state"] = "missing"
        elif path.stat().st_size != art.get("size") or sha256_file(path) != art.get("sha256"):
            # Never archive a file whose bytes are not the ones the record vouches for (R17).
            entry["state"] = "changed since recorded (not archived)"
        else:
            entry["state"] = "verified"
            if dest is not None:
                name = path.name
                while name in used:
                    name = f"{Path(name).stem}_{len(used)}{Path(name).suffix}"
                used.add(name)
                dest.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, dest / name)
                if sha256_file(dest / name) != art.get("sha256"):
                    raise ArchiveError(f"{path}: the copy does not match its sha256 (disk error?)")
                entry["archived_as"] = f"artifacts/{name}"
        rows.append(entry)
    return rows


def task_file_state(record: Record) -> tuple[Path | None, str, str]:
    """The user's task file: (source, name in the archive, state).

    Archived only when it is the very file the run hashed: the record's `campaign.task_file`
    names it with its sha256 (written when the campaign opened), it is a `.py` file, and its
    bytes still match. An edited file is reported, never archived: the archive's instructions
    would otherwise run code that is not the code that was piloted.
    """
    campaign = record.data.get("campaign", {})
    rel = str((campaign.get("spec", {}).get("task", {}) or {}).get("file", "") or "")
    if not rel:
        return None, "", ""
    parts = PurePosixPath(rel).parts
    if PurePosixPath(rel).is_absolute() or ".." in parts or not rel.endswith(".py"):
        return None, "", f"task file {rel!r} is not a .py file beside the campaign (not archived)"
    hashed = campaign.get("task_file") or {}
    sha, where = hashed.get("sha256"), hashed.get("path")
    if not isinstance(sha, str) or not isinstance(where, str) or not where.endswith(".py"):
        return None, rel, "the record holds no sha256 of the task file (not archived)"
    src = Path(where)
    try:
        ok = src.is_file() and sha256_file(src) == sha
    except OSError:
        ok = False
    if not ok:
        return None, rel, f"task file {src} changed since the run, or is gone (not archived)"
    return src, rel, "verified"


def _torch_pin(torch_version: str) -> str:
    return torch_version.split("+", 1)[0] if torch_version else ""


def _instructions(record: Record, manifest: list[dict[str, Any]], task: str, revision: str) -> str:
    data = record.data
    c = data.get("campaign", {})
    env = data.get("environment", {})
    torch_v = str(env.get("torch", ""))
    pin = _torch_pin(torch_v)
    cuda = str(env.get("cuda", "") or "")
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    lines = [
        f"# Reproduce the pilot `{c.get('name', '?')}` (record {c.get('id', '?')})",
        "",
        f"Recorded {c.get('created', '?')} on `{env.get('platform', '?')}`, device `{env.get('device', '?')}`"
        + (
            f" ({', '.join(d.get('name', '?') for d in env.get('devices', []))})"
            if env.get("devices")
            else ""
        )
        + ".",
        "",
        "| what | version |",
        "|---|---|",
        f"| python | {env.get('python', '?')} |",
        f"| torch | {torch_v or '?'}{f' (CUDA {cuda})' if cuda else ''} |",
        f"| pilot-tui (run) | {env.get('pilot_tui', '?')} |",
        f"| pilot-tui (archive) | {__version__} |",
        f"| code revision | {revision or 'not available (not a git checkout)'} — read when this archive was written, {now} |",
        f"| campaign sha256 | {c.get('spec_sha256', '?')} |",
        "",
        "## Files",
        "",
        "- `record.toml` — the campaign record (every phase row, verdicts, measured memory and durations)",
        "- `campaign.toml` — the campaign as declared before the run",
    ]
    if task:
        lines.append(f"- `{task}` — the task file the campaign names")
    lines += [
        "- `metrics.json` — the raw metrics of every phase, run and variant",
        "- `manifest.toml` — every artifact with its path, size and sha256",
    ]
    if any("archived_as" in m for m in manifest):
        lines.append("- `artifacts/` — the verified artifacts, and `artifacts/SHA256SUMS`")
    install_torch = f'.venv/bin/pip install "torch=={pin}"' if pin else ".venv/bin/pip install torch"
    if cuda and pin:
        install_torch += f"  # a CUDA {cuda} build; on a rental image that ships torch {pin}, skip this"
    checkout = (
        f"git clone <pilot-tui repository> pilot-tui && cd pilot-tui && git checkout {revision.removesuffix('+dirty')}"
        if revision
        else "cd <a pilot-tui source checkout>"
    )
    lines += [
        "",
        "## Commands",
        "",
        "```sh",
        checkout,
        f"python{'.'.join(str(env.get('python', '3')).split('.')[:2])} -m venv .venv",
        install_torch,
        ".venv/bin/pip install -e .",
        "# ARCHIVE is this folder; the campaign finds its task file beside it",
        ".venv/bin/pilot-tui run ARCHIVE/campaign.toml --headless --records ARCHIVE/rerun",
        "```",
        "",
        "Then compare the new record with `record.toml`: the same phases should pass. On CPU the resume",
        "and final checks are bitwise, so their losses and outputs must be identical.",
    ]
    if revision.endswith("+dirty"):
        lines += ["", "Note: the code had uncommitted changes when this archive was written."]
    if any("archived_as" in m for m in manifest):
        lines += ["", "Check the artifacts with `cd artifacts && sha256sum -c SHA256SUMS`."]
    lines += ["", "## Verdicts", "", "| step | verdict | reason |", "|---|---|---|"]
    for row in data.get("phases", []):
        reason = str(row.get("reason", "")).replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {row.get('step', row.get('name', '?'))} | {row.get('verdict', '?')} | {reason} |")
    conclusion = data.get("conclusion")
    if isinstance(conclusion, dict) and conclusion.get("text"):
        lines += ["", "## Conclusion", "", str(conclusion["text"])]
    lines += ["", f"Archive written by pilot-tui {__version__} with Python {platform.python_version()}.", ""]
    return "\n".join(lines)


def _fill(folder: Path, record: Record, with_artifacts: bool) -> None:
    data = record.data
    spec_text = data.get("campaign", {}).get("spec_text")
    if not isinstance(spec_text, str):
        raise ArchiveError(f"{record.path}: the record holds no campaign spec (campaign.spec_text)")
    folder.mkdir(parents=True)
    shutil.copy2(record.path, folder / "record.toml")
    (folder / "campaign.toml").write_text(spec_text, encoding="utf-8")
    src, rel, task_state = task_file_state(record)
    if src is not None:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, folder / rel)
        if sha256_file(folder / rel) != record.data["campaign"]["task_file"]["sha256"]:
            raise ArchiveError(f"{src}: the copy does not match its sha256 (changed while copying?)")
    metrics = {
        k: data[k]
        for k in ("environment", "accounting", "dataset", "phases", "runs", "variants")
        if k in data
    }
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=1, default=str) + "\n", encoding="utf-8")
    manifest = _manifest(record, folder / "artifacts" if with_artifacts else None)
    listing: dict[str, Any] = {"artifacts": manifest}
    if task_state:
        listing["task_file"] = {"name": rel, "state": task_state}
    (folder / "manifest.toml").write_text(dumps(listing), encoding="utf-8")
    archived = [m for m in manifest if "archived_as" in m]
    if archived:
        sums = "".join(
            _sums(folder / "artifacts", m["archived_as"].removeprefix("artifacts/"), m) for m in archived
        )
        (folder / "artifacts" / "SHA256SUMS").write_text(sums, encoding="utf-8")
    text = _instructions(
        record,
        manifest,
        rel if src is not None else "",
        record.data.get("environment", {}).get("code_revision") or code_revision(),
    )
    if task_state and src is None:
        text += f"\nNote: {task_state}; this archive cannot rerun the pilot as it ran.\n"
    (folder / "INSTRUCTIONS.md").write_text(text, encoding="utf-8")


def write_archive(
    record_path: str | Path, out: str | Path | None = None, *, with_artifacts: bool = False
) -> Path:
    """Write the archive of a record; return its path. RecordError (exit 2) on bad input."""
    record = Record.read(record_path)
    target = Path(out) if out else record.path.with_name(f"{record.path.stem}-archive")
    if target.exists():
        raise ArchiveError(f"{target}: already exists; choose another --out")
    if not target.parent.is_dir():
        raise ArchiveError(f"{target.parent}: no such folder for --out")
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(target), suffix=TEMP_SUFFIX, dir=target.parent))
    try:
        folder = tmp / _stem(target)
        _fill(folder, record, with_artifacts)
        if _is_tar(target):
            tar_tmp = tmp / "archive.tar.gz"
            with tarfile.open(tar_tmp, "w:gz") as tar:
                tar.add(folder, arcname=folder.name)
            os.replace(tar_tmp, target)
        else:
            os.replace(folder, target)
    except OSError as exc:
        raise ArchiveError(f"{target}: cannot write the archive: {exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
