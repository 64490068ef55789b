"""One readable line from an exception, for a row's reason or an exit-2 message. Pure.

Many libraries start their messages with a newline (safetensors' "\nSome tensors share memory…"):
keeping the raw first line would leave a reason that reads only `RuntimeError:`.
"""

from __future__ import annotations


def first_line(text: str) -> str:
    """The first line that holds more than whitespace, stripped; "" when there is none."""
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


def exception_line(exc: BaseException) -> str:
    """`Type: first non-empty line of the message` (just `Type` when the message is empty)."""
    line = first_line(str(exc))
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__
