"""JSONL data for the built-in Hugging Face tasks: read, normalise, and refuse bad lines by number.

Pure Python (no torch, no transformers): `pilot-tui init` and both HF tasks read data through it.
Every problem is one `DataError` line naming the file and the JSONL line, ready for exit code 2.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMATS = ("messages", "prompt_completion", "text")
TRAIN_ON = ("assistant", "last_assistant", "all")
ROLES = ("system", "user", "assistant")
# ShareGPT spells roles its own way; used only when a campaign declares this mapping (recorded).
SHAREGPT_ROLES = {"system": "system", "human": "user", "gpt": "assistant"}
# Fields that commonly name the unit of leakage in chat and text data, most specific first.
GROUP_FIELDS = (
    "conversation_id",
    "conversation",
    "dialog_id",
    "thread_id",
    "session_id",
    "source",
    "document",
)


class DataError(ValueError):
    """A data file or model directory that cannot be used; one line naming the file (and line)."""


@dataclass(frozen=True)
class ChatLayout:
    """Where a chat row keeps its turns, and how its roles map to system/user/assistant."""

    field: str = "messages"
    role_key: str = "role"
    content_key: str = "content"
    # Empty: the roles must already be system/user/assistant.
    roles: Mapping[str, str] | None = None


def read_jsonl(path: Path, limit: int = 0) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; a line that is not a JSON object is refused.
    A byte-order mark at the start (Windows exports) is read as UTF-8, not as a stray character."""
    try:
        handle = path.open(encoding="utf-8-sig")
    except FileNotFoundError:
        raise DataError(f"{path}: data file not found") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read the data file: {exc.strerror or exc}") from None
    rows: list[tuple[int, dict[str, Any]]] = []
    with handle:
        try:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line.strip())
                except json.JSONDecodeError as exc:
                    raise DataError(
                        f"{path}: line {number}: not valid JSON ({exc.msg} at column {exc.colno})"
                    ) from None
                if not isinstance(obj, dict):
                    raise DataError(
                        f"{path}: line {number}: expected a JSON object, got {type(obj).__name__}"
                    )
                rows.append((number, obj))
                if limit and len(rows) >= limit:
                    break
        except UnicodeDecodeError:
            raise DataError(f"{path}: line {len(rows) + 1}: not UTF-8 text") from None
    if not rows:
        raise DataError(f"{path}: the data file holds no JSON line")
    return rows


def _text(path: Path, number: int, obj: Mapping[str, Any], key: str) -> str:
    if key not in obj:
        known = ", ".join(sorted(obj)) or "none"
        raise DataError(f"{path}: line {number}: missing field {key!r} (fields here: {known})")
    value = obj[key]
    if not isinstance(value, str):
        raise DataError(f"{path}: line {number}: field {key!r} must be a string, got {type(value).__name__}")
    return value


def chat_turns(path: Path, number: int, obj: Mapping[str, Any], layout: ChatLayout) -> list[dict[str, str]]:
    """The conversation as [{role, content}] with roles system/user/assistant, or a DataError."""
    if layout.field not in obj:
        hint = ""
        if "conversations" in obj and layout.field != "conversations":
            hint = (
                " — this looks like ShareGPT data: declare it with task.options "
                'messages_field = "conversations", role_key = "from", content_key = "value", '
                'roles = { human = "user", gpt = "assistant", system = "system" }'
            )
        known = ", ".join(sorted(obj)) or "none"
        raise DataError(f"{path}: line {number}: missing field {layout.field!r} (fields here: {known}){hint}")
    turns = obj[layout.field]
    if not isinstance(turns, list) or not turns:
        raise DataError(f"{path}: line {number}: field {layout.field!r} must be a non-empty list of turns")
    out = []
    for k, turn in enumerate(turns):
        where = f"{path}: line {number}: {layout.field}[{k}]"
        if not isinstance(turn, dict):
            raise DataError(
                f"{where}: expected an object with {layout.role_key!r} and {layout.content_key!r}"
            )
        role = turn.get(layout.role_key)
        content = turn.get(layout.content_key)
        if not isinstance(role, str):
            raise DataError(f"{where}: missing field {layout.role_key!r}")
        if not isinstance(content, str):
            raise DataError(f"{where}: missing text field {layout.content_key!r}")
        mapped = layout.roles.get(role) if layout.roles else role
        if mapped not in ROLES:
            declared = f" (declared roles: {', '.join(layout.roles)})" if layout.roles else ""
            raise DataError(
                f"{where}: unknown role {role!r}{declared}; roles must be {', '.join(ROLES)} "
                "or be mapped by task.options.roles"
            )
        if mapped == "assistant" and not content.strip():
            raise DataError(
                f"{where}: empty assistant turn (nothing to learn, and the model would learn to stop)"
            )
        out.append({"role": mapped, "content": content})
    if not any(t["role"] == "assistant" for t in out):
        raise DataError(f"{path}: line {number}: no assistant turn in {layout.field!r}: nothing to train on")
    return out


def group_of(obj: Mapping[str, Any], group_field: str, number: int) -> str:
    """The example's leakage unit: the declared field, else its own line (every row its own group)."""
    if group_field and group_field in obj:
        return str(obj[group_field])
    return f"line{number}"


def load_lm_examples(
    path: Path,
    fmt: str,
    *,
    layout: ChatLayout = ChatLayout(),
    prompt_field: str = "prompt",
    completion_field: str = "completion",
    text_field: str = "text",
    group_field: str = "",
    limit: int = 0,
) -> list[dict[str, Any]]:
    """Examples for the causal LM task: id, group, and the normalised content of each line."""
    if fmt not in FORMATS:
        raise DataError(f"task.options.format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    examples = []
    for number, obj in read_jsonl(path, limit):
        ex: dict[str, Any] = {
            "id": str(obj.get("id", f"line{number}")),
            "line": number,
            "group": group_of(obj, group_field, number),
        }
        if fmt == "messages":
            ex["messages"] = chat_turns(path, number, obj, layout)
        elif fmt == "prompt_completion":
            ex["prompt"] = _text(path, number, obj, prompt_field)
            ex["completion"] = _text(path, number, obj, completion_field)
            if not ex["completion"].strip():
                raise DataError(f"{path}: line {number}: empty {completion_field!r}: nothing to learn")
        else:
            ex["text"] = _text(path, number, obj, text_field)
            if not ex["text"].strip():
                raise DataError(f"{path}: line {number}: empty {text_field!r}")
        if group_field and group_field not in obj:
            raise DataError(f"{path}: line {number}: missing group field {group_field!r}")
        examples.append(ex)
    return examples


def load_classification_examples(
    path: Path,
    *,
    text_field: str,
    label_field: str,
    name_field: str = "",
    group_field: str = "",
    limit: int = 0,
) -> list[dict[str, Any]]:
    """Examples for sequence classification: text, raw label (int or str), optional label name."""
    examples = []
    for number, obj in read_jsonl(path, limit):
        text = _text(path, number, obj, text_field)
        if label_field not in obj:
            raise DataError(f"{path}: line {number}: missing field {label_field!r}")
        label = obj[label_field]
        if isinstance(label, bool) or not isinstance(label, int | str):
            raise DataError(
                f"{path}: line {number}: field {label_field!r} must be an integer or a string, got {label!r}"
            )
        ex: dict[str, Any] = {
            "id": str(obj.get("id", f"line{number}")),
            "line": number,
            "group": group_of(obj, group_field, number),
            "text": text,
            "label": label,
        }
        if name_field:
            ex["label_name"] = str(_text(path, number, obj, name_field) if name_field in obj else "")
        examples.append(ex)
    return examples


def detect_format(rows: Sequence[tuple[int, Mapping[str, Any]]]) -> tuple[str, dict[str, Any]]:
    """The data's format and the task options it needs, from the first row (for `init`)."""
    _, first = rows[0]
    if isinstance(first.get("messages"), list):
        return "messages", {}
    if isinstance(first.get("conversations"), list):
        return "messages", {
            "messages_field": "conversations",
            "role_key": "from",
            "content_key": "value",
            "roles": dict(SHAREGPT_ROLES),
        }
    if "prompt" in first and "completion" in first:
        return "prompt_completion", {}
    if "text" in first:
        return "text", {}
    return "", {}


def detect_group_field(rows: Sequence[tuple[int, Mapping[str, Any]]]) -> str:
    """A field that looks like a leakage unit: known name, in every row, shared by some rows."""
    for name in GROUP_FIELDS:
        values = [obj.get(name) for _, obj in rows]
        if all(v is not None for v in values) and len(set(map(str, values))) < len(values):
            return name
    return ""
