"""The campaign record: the only state that lasts.

A TOML file rewritten *atomically* after every phase (`atomic.write_atomic`: temp file in the
same folder, fsync, os.replace, fsync the folder), so a crash, an out-of-memory or a SIGKILL at any moment leaves
either the previous complete record or the new one, never a torn file.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
import stat
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from .atomic import write_text_atomic

SCHEMA_VERSION = 1
# Sections that hold lists of tables, appended to and never overwritten.
LIST_SECTIONS = ("phases", "variants", "runs", "artifacts", "notes")


class RecordError(Exception):
    """A record file that cannot be read; the message names the file."""


def _toml_safe(value: Any) -> Any:
    # TOML has no null: drop None rather than invent a value.
    if isinstance(value, dict):
        return {str(k): _toml_safe(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_toml_safe(v) for v in value if v is not None]
    return value


# Far above any real record (thousands of rows); a bound so /dev/zero-like input cannot fill memory.
MAX_RECORD_BYTES = 256 << 20


def read_regular_text(path: Path, max_bytes: int) -> str:
    """UTF-8 text of a regular file of at most `max_bytes`; ValueError otherwise (R24).

    Opened non-blocking and checked after opening: a FIFO neither blocks nor is read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ValueError("not a regular file")
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"larger than {max_bytes:,} bytes")
    return data.decode("utf-8")


def dumps(data: dict[str, Any]) -> str:
    return tomli_w.dumps(_toml_safe(data))


def new_record_id(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.UTC)
    # 4 random bytes: two sessions started in the same second must not draw the same id.
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(4)}"


class Record:
    """An in-memory campaign record bound to its file; `save()` writes it atomically."""

    def __init__(self, path: Path, data: dict[str, Any], read_only: bool = False) -> None:
        self.path = path
        self.data = data
        self.read_only = read_only
        # True until the first save, which creates the file exclusively.
        self.new = False

    @classmethod
    def create(
        cls,
        records_dir: Path,
        *,
        record_id: str,
        name: str,
        spec_path: Path,
        spec_text: str,
        spec_sha256: str,
        spec_raw: dict[str, Any],
        environment: dict[str, Any],
        accounting: dict[str, Any],
        dataset: dict[str, Any],
    ) -> Record:
        data: dict[str, Any] = {
            "schema": SCHEMA_VERSION,
            "campaign": {
                "name": name,
                "id": record_id,
                "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "spec_path": str(spec_path),
                "spec_sha256": spec_sha256,
                "spec_text": spec_text,
                "spec": spec_raw,
            },
            "environment": environment,
            "accounting": accounting,
            "dataset": dataset,
            "phases": [],
        }
        record = cls(records_dir / f"{name}-{record_id}.toml", data)
        record.new = True
        return record

    @classmethod
    def read(cls, path: str | Path) -> Record:
        """Open a saved record read-only (R20)."""
        p = Path(path)
        try:
            data = tomllib.loads(read_regular_text(p, MAX_RECORD_BYTES))
        except FileNotFoundError:
            raise RecordError(f"{p}: record not found") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            if isinstance(exc, tomllib.TOMLDecodeError):
                raise RecordError(f"{p}: not a valid TOML record: {exc}") from None
            raise RecordError(f"{p}: cannot read the record: {exc}") from None
        except RecursionError:
            raise RecordError(f"{p}: not a pilot-tui record (arrays or tables nested too deeply)") from None
        if "campaign" not in data or "phases" not in data:
            raise RecordError(f"{p}: not a pilot-tui record (no [campaign] or [[phases]])")
        return cls(p, data, read_only=True)

    @property
    def id(self) -> str:
        return str(self.data["campaign"]["id"])

    @property
    def phases(self) -> list[dict[str, Any]]:
        return self.data.setdefault("phases", [])

    def append(self, section: str, row: dict[str, Any]) -> None:
        """Add a row to a list section; existing rows are never replaced (R14)."""
        self.data.setdefault(section, []).append(row)

    def set_section(self, section: str, value: Any) -> None:
        """Set a whole non-list section (e.g. `plan`, `conclusion`)."""
        if section in LIST_SECTIONS:
            raise ValueError(f"[{section}] only grows by append")
        self.data[section] = value

    def save(self) -> Path:
        if self.read_only:
            raise RecordError(f"{self.path}: opened read-only")
        write_text_atomic(self.path, dumps(self.data), exclusive=self.new)
        self.new = False
        return self.path
