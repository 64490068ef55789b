"""One readable line from a message or an exception, for a row's reason or an exit-2 message. Pure.

The one place a "first line" is taken: reasons, details, the stack check, the rank group's
failures and the command lines all read it from here.

Many libraries start their messages with a newline (safetensors' "\nSome tensors share memory…"):
keeping the raw first line would leave a reason that reads only `RuntimeError:`.
"""

from __future__ import annotations


def first_line(text: str) -> str:
    """The first line that holds more than whitespace, stripped; "" when there is none."""
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


def exception_line(exc: BaseException, limit: int = 0) -> str:
    """`Type: first non-empty line of the message` (just `Type` when the message is empty),
    cut to `limit` characters when one is given (a detail that must stay short)."""
    line = first_line(str(exc))
    text = f"{type(exc).__name__}: {line}" if line else type(exc).__name__
    return text[:limit] if limit else text


def message_line(exc: BaseException) -> str:
    """The message's first non-empty line alone, or the exception's type when it has none."""
    return first_line(str(exc)) or type(exc).__name__
