"""Record and task text made safe for a terminal (R24). Pure: no torch, no Textual.

Every string that comes from a record, a task or an exception is data, never instructions to
the terminal: control characters are shown as visible escapes (`\\x1b`), bidirectional
overrides too, and a string is cut to a bounded length before it is rendered, so a crafted
record can neither rewrite the terminal nor stall the first frame with megabytes of text.
Markup is the renderer's business: views wrap these strings in `rich.text.Text` (see
`literal`) or pass `markup=False`, never `Text.from_markup`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# Enough for any reason, path or traceback line a person reads on one screen.
MAX_CHARS = 2000
# A list longer than this in a record (losses, examples) is cut for display, never for the record.
MAX_ITEMS = 5000

# C0 controls except tab and newline, DEL, C1 controls, and the bidi overrides/isolates that
# reorder what is shown (trojan-source style).
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\r": "\\r", "\n": "\\n", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group(0)
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(value: Any, limit: int = MAX_CHARS) -> str:
    """`value` as text with control characters escaped and at most about `limit` characters.

    Newlines and tabs are kept (multi-line reasons and tracebacks stay readable).
    """
    return _bounded(value, limit, _UNSAFE)


def one_line(value: Any, limit: int = MAX_CHARS) -> str:
    """Like `clean`, and newlines and tabs escaped too: for one terminal line (headless, errors)."""
    return _bounded(value, limit, _UNSAFE_LINE)


def _bounded(value: Any, limit: int, unsafe: re.Pattern[str]) -> str:
    text = value if isinstance(value, str) else str(value)
    cut = ""
    if len(text) > limit:
        cut = f"… ({len(text) - limit:,} more characters)"
        text = text[:limit]
    return unsafe.sub(_escape, text) + cut


def clean_tree(value: Any, limit: int = MAX_CHARS) -> Any:
    """A copy of a record section (dicts, lists, strings, numbers) with every string `clean`ed.

    Keys are cleaned too: a crafted record may hide escapes in a table's key. Long lists are
    cut to `MAX_ITEMS` for display; the record itself is never changed.
    """
    if isinstance(value, str):
        return clean(value, limit)
    if isinstance(value, Mapping):
        return {clean(k, 200) if isinstance(k, str) else k: clean_tree(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items = [clean_tree(v, limit) for v in value[:MAX_ITEMS]]
        return items if isinstance(value, list) else tuple(items)
    return value


def literal(value: Any, limit: int = MAX_CHARS, style: str = "") -> Any:
    """A `rich.text.Text` of the cleaned value: shown as written, square brackets included."""
    from rich.text import Text  # rich ships with textual; imported here so the module stays pure

    return Text(clean(value, limit), style=style)
