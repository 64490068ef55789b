"""Spec fuzz: hundreds of broken versions of the demo campaign, each refused in one line (R24).

Types, NaN/inf, ranges, unknown keys and sections, encodings, sizes and non-regular files: every
mutation ends in a SpecError that names the file (and the key when there is one), no traceback,
nothing written, within a bound that only guards against a hang. In process through the spec
loader; a few through the CLI's `main` and one through a real CLI process.
"""

from __future__ import annotations

import copy
import math
import os
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from conftest import DEMO, REPO

from pilot_tui.commands.cli import main
from pilot_tui.core.spec import SpecError, load_spec

HANG_GUARD_S = 10.0  # far above any parse: only a hang or a blow-up could reach it


def leaves(value: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """Every (path, value) of a TOML document; task.options is free-form (the task's kwargs)."""
    if path == ("task", "options"):
        return
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, (*path, k))
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        for i, v in enumerate(value):
            yield from leaves(v, (*path, i))
    else:
        yield path, value


def tables(value: Any, path: tuple = ()) -> Iterator[tuple]:
    if path == ("task", "options"):
        return
    if isinstance(value, dict):
        yield path
        for k, v in value.items():
            yield from tables(v, (*path, k))
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        for i, v in enumerate(value):
            yield from tables(v, (*path, i))


def key_name(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
    return out


def set_in(doc: dict, path: tuple, value: Any) -> dict:
    doc = copy.deepcopy(doc)
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return doc


def wrong_type(value: Any) -> Any:
    if isinstance(value, int | float):  # bool included
        return "x"
    if isinstance(value, str):
        return 7
    if isinstance(value, list):
        return "not a list"
    return [1]


def mutations() -> Iterator[tuple[str, dict, str]]:
    """(label, document, key the message must name)."""
    demo = tomllib.loads(DEMO.read_text())
    for path, value in leaves(demo):
        key = key_name(path)
        yield f"type {key}", set_in(demo, path, wrong_type(value)), key
        if isinstance(value, int | float) and not isinstance(value, bool):
            yield f"nan {key}", set_in(demo, path, math.nan), key
            yield f"inf {key}", set_in(demo, path, -math.inf), key
    for path in tables(demo):
        key = key_name((*path, "bogus_key"))
        yield f"unknown key in {key_name(path) or 'top'}", set_in(demo, (*path, "bogus_key"), 1), key
    yield "unknown section", demo | {"bogus": {"a": 1}}, "bogus"
    yield "misspelled limits", demo | {"limits": {"stedy": {"time_s": 5}}}, "limits.stedy"
    ranges = [
        (("campaign", "name"), "n" * 300),
        (("campaign", "name"), "a/b"),
        (("batch", "microbatch"), 0),
        (("batch", "accumulation"), -1),
        (("batch", "precision"), "fp8"),
        (("split", "train"), 2.0),
        (("optim", "lr"), 0.0),
        (("optim", "schedule"), "exponential"),
        (("plan", "headroom"), 11.0),
        (("lr_board", "stop", "explosion_factor"), 1.0),
        (("resume", "k"), 0),
        (("overfit", "recover"), 1.5),
        (("variants", 0, "id"), "control"),
        (("optim", "name"), "lion"),
        (("variants", 0, "optimizer"), "adam"),
        (("variants", 0, "precision"), "fp8"),
    ]
    for key, value in ranges:
        yield f"range {key_name(key)}", set_in(demo, key, value), key_name(key)


MUTATIONS = list(mutations())


def assert_refused(path: Path, key: str | None) -> str:
    t0 = time.monotonic()
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert time.monotonic() - t0 < HANG_GUARD_S
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message, message
    assert message.startswith(str(path)), message
    if key:
        assert key in message, (key, message)
    return message


def test_at_least_a_hundred_spec_mutations_are_each_refused_in_one_line(tmp_path):
    assert len(MUTATIONS) >= 100, len(MUTATIONS)
    path = tmp_path / "campaign.toml"
    for label, doc, key in MUTATIONS:
        path.write_text(tomli_w.dumps(doc))  # tomli-w writes nan and inf as TOML spells them
        try:
            assert_refused(path, key)
        except AssertionError as exc:
            raise AssertionError(f"{label}: {exc}") from None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["campaign.toml"]  # nothing written


def test_encodings_sizes_nesting_and_non_regular_files(tmp_path, capsys):
    text = DEMO.read_text()
    cases: dict[str, Path] = {}
    for name, data in {
        "utf16.toml": text.encode("utf-16"),
        "latin1.toml": text.replace("Tiny", "Tïny").encode("latin-1", errors="replace"),
        "nul.toml": text.encode() + b"\x00",
        "huge.toml": text.encode() + b"# " + b"x" * (2 << 20) + b"\n",
        "nested.toml": b"a = " + b"[" * 50_000 + b"]" * 50_000 + b"\n",
        "empty.toml": b"",
    }.items():
        (tmp_path / name).write_bytes(data)
        cases[name] = tmp_path / name
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)  # nobody writes to it: reading it would block forever
    cases["fifo"] = fifo
    cases["zero"] = Path("/dev/zero")  # endless: reading it whole would fill the memory
    cases["folder"] = tmp_path
    expected = {
        "utf16.toml": "not UTF-8",
        "latin1.toml": "not UTF-8",
        "huge.toml": "at most",
        "nested.toml": "nested too deeply",
        "fifo": "not a regular file",
        "zero": "not a regular file",
        "folder": "not a regular file",
    }
    for name, path in cases.items():
        message = assert_refused(path, None)
        assert expected.get(name, "") in message, (name, message)
    # The same through the CLI entry: exit 2, one line on stderr, no records folder.
    for name in ("fifo", "zero", "huge.toml", "nested.toml"):
        assert main(["run", str(cases[name]), "--headless", "--records", str(tmp_path / "records")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("pilot-tui: error: "), err
    assert not (tmp_path / "records").exists()


def test_a_fifo_through_a_real_cli_process_ends_at_once(tmp_path):
    fifo = tmp_path / "campaign.toml"
    os.mkfifo(fifo)
    proc = subprocess.run(
        [sys.executable, "-m", "pilot_tui", "run", str(fifo), "--headless"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "not a regular file" in proc.stderr
    assert not (tmp_path / "records").exists()
