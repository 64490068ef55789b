"""Run a user's training script unchanged up to its first `Trainer.train()`, and take the trainer.

`Trainer.train` is patched on the class (TRL's trainers do not override it; a subclass that
does is patched when it is constructed), `sys.argv` is what the user would type, the script's
folder is on the import path and it runs as `__main__`. The first `train()` raises `Captured`,
a BaseException (a script's `except Exception` cannot swallow it), which unwinds the script
before any step, save or push. Everything that ran before (model load, tokenisation, packing)
is the `load` gate's time and memory.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import runpy
import sys
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import transformers

from ....core.reasons import exception_line


class CaptureError(Exception):
    """The script could not be captured; one line naming the script (and its line), exit 2."""


class Captured(BaseException):
    """Raised by the patched `train()`: carries the trainer and the arguments train() got."""

    def __init__(self, trainer: Any, kwargs: dict[str, Any]) -> None:
        super().__init__("trainer captured")
        self.trainer = trainer
        self.kwargs = kwargs


@dataclass
class Capture:
    """A captured trainer and what it cost to build."""

    trainer: Any
    train_kwargs: dict[str, Any]
    script: Path
    argv: list[str]
    seconds: float
    trainers_built: int
    notes: list[str] = field(default_factory=list)


TRAIN_ARGS = ("resume_from_checkpoint", "trial", "ignore_keys_for_eval")


class _Tail(io.TextIOBase):
    """stderr as the script sees it: written through, the last lines kept for the error line
    (argparse prints its complaint there before `SystemExit(2)`)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.lines: list[str] = []
        self._partial = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.stream.write(text)
        chunk = self._partial + text
        *done, self._partial = chunk.split("\n")
        self.lines = (self.lines + [d for d in done if d.strip()])[-20:]
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def last(self) -> str:
        pending = [self._partial] if self._partial.strip() else []
        return next((ln.strip() for ln in reversed(self.lines + pending)), "")


@contextlib.contextmanager
def _patched(built: list[Any]) -> Iterator[None]:
    base = transformers.Trainer
    original_train, original_init = base.train, base.__init__
    patched_classes: list[tuple[type, Any]] = []

    def spy_train(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise Captured(self, dict(zip(TRAIN_ARGS, args, strict=False)) | kwargs)

    def spy_init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        built.append(self)
        cls = type(self)
        # A subclass with its own train() bypasses the class patch: patch it as well.
        if cls.train is not spy_train and "train" in cls.__dict__:
            patched_classes.append((cls, cls.__dict__["train"]))
            cls.train = spy_train

    base.train, base.__init__ = spy_train, spy_init
    try:
        yield
    finally:
        base.train, base.__init__ = original_train, original_init
        for cls, train in patched_classes:
            cls.train = train


@contextlib.contextmanager
def _as_command_line(
    script: Path, argv: Sequence[str], cwd: Path, env: Mapping[str, str], module: str = ""
) -> Iterator[None]:
    saved_argv, saved_path, saved_cwd = sys.argv, list(sys.path), os.getcwd()
    # The environment stays set: the trainer reads some of it later (accelerate, tokenizers).
    os.environ.update(env)
    sys.argv = [str(script), *argv]  # HfArgumentParser also reads argv[0].with_suffix(".args")
    # `python script` puts the script's folder first on the path, `python -m` the working folder.
    first = str(cwd) if module else str(script.parent)
    sys.path.insert(0, first)
    os.chdir(cwd)
    try:
        yield
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if first not in sys.path:
            sys.path.append(first)  # the captured objects may import from there later
        os.chdir(saved_cwd)


def module_file(module: str) -> Path:
    """The file `python -m module` runs (a package runs its __main__)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise CaptureError(f"-m {module}: no such module")
    origin = Path(spec.origin)
    if spec.submodule_search_locations is not None:
        origin = origin.with_name("__main__.py")
    return origin


def _script_line(exc: BaseException, script: Path) -> str:
    script = script.resolve()  # a frame's file name may go through a link the campaign kept
    if isinstance(exc, SyntaxError) and exc.filename and Path(exc.filename).resolve() == script:
        return f" line {exc.lineno}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == script]
    return f" line {frames[-1].lineno}" if frames else ""


def capture(
    script: Path | None,
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    module: str = "",
) -> Capture:
    """Run `python script argv...` (or `python -m module argv...`) in `cwd` up to its first
    `Trainer.train()`. A console command is a script: its file runs its package's entry point."""
    if module:
        script = module_file(module)
    assert script is not None
    script = Path(os.path.abspath(script))
    built: list[Any] = []
    tail = _Tail(sys.stderr)
    t0 = time.perf_counter()
    try:
        with (
            _patched(built),
            _as_command_line(script, argv, cwd, env or {}, module),
            contextlib.redirect_stderr(tail),
        ):
            if module:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(str(script), run_name="__main__")
    except Captured as c:
        if not isinstance(c.trainer, transformers.Trainer):
            raise CaptureError(f"{script}: train() was called on a {type(c.trainer).__name__}") from None
        return Capture(c.trainer, c.kwargs, script, list(argv), time.perf_counter() - t0, len(built))
    except SystemExit as exc:
        code = exc.code
        if code not in (0, None):
            said = tail.last()
            detail = f": {said}" if said else ""
            raise CaptureError(
                f"{script}: exited with status {code} before calling train(){detail}"
            ) from None
    except BaseException as exc:  # the user's code: any failure is bad input, never a crash
        raise CaptureError(
            f"{script}:{_script_line(exc, script)} raised before calling train(): {exception_line(exc)}"
        ) from None
    what = (
        f"built {len(built)} {type(built[-1]).__name__} but never called train()"
        if built
        else "finished without building a Trainer or calling train()"
    )
    raise CaptureError(
        f"{script}: {what} (with task.args {list(argv)}; does it need a flag such as --do_train?)"
    )
