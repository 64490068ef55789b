"""docs/requirements.md defines every requirement id the code cites, and points at real files."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TABLE = REPO / "docs" / "requirements.md"
ID = re.compile(r"\bR(\d+)\b")


def defined() -> dict[str, list[str]]:
    """id -> the table's cells, for each row of the table."""
    rows = {}
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.fullmatch(r"R\d+", cells[0]):
            rows[cells[0]] = cells
    return rows


def test_every_cited_id_is_defined_once_in_order():
    rows = defined()
    assert list(rows) == [f"R{i}" for i in range(1, len(rows) + 1)]
    cited = {
        f"R{m}"
        for folder in ("pilot_tui", "tests", "benchmarks", "docs")
        for path in (REPO / folder).rglob("*")
        if path.suffix in (".py", ".md", ".toml") and "__snapshots__" not in path.parts
        for m in ID.findall(path.read_text(encoding="utf-8", errors="replace"))
    }
    assert cited <= set(rows), f"cited but not defined in docs/requirements.md: {sorted(cited - set(rows))}"


def test_every_place_and_test_named_exists():
    for rid, (_, _, where, tests) in defined().items():
        for root, cell in (("pilot_tui", where), ("tests", tests)):
            for name in re.findall(r"`([\w/.*]+?)`", cell):
                if "/" not in name and not name.endswith(".py"):
                    continue  # a class or key name, not a path
                assert list((REPO / root).glob(name.rstrip("/"))), f"{rid}: {root}/{name} does not exist"
