"""Textual messages the background workers post to the app (never widget calls from a thread).

Each wraps one immutable value: a runner event from `pilot_tui.core.events`, an NVML snapshot, or a
change of the runner thread's state. The app's `@on` handlers update reactive state on the UI thread.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from textual.message import Message

from ..core import events as ev
from ..core.text import clean, clean_tree
from .cpu import CpuSample
from .nvml import NvmlSnapshot


class RunnerEvent(Message):
    """Base: one event from the runner, exactly as `Session.run_step` yielded it."""

    def __init__(self, event: ev.WireMessage) -> None:
        super().__init__()
        self.event = event


class PhaseStartedMsg(RunnerEvent):
    """A step began (`event` is a PhaseStarted)."""


class PhaseProgressMsg(RunnerEvent):
    """Progress inside a long step (`event` is a PhaseProgress)."""


class PhaseFinishedMsg(RunnerEvent):
    """A step ended and its row is already saved in the record (`event` is a PhaseFinished)."""


class CountersMsg(RunnerEvent):
    """The runner's own memory counters (`event` is a Counters)."""


class RunUpdateMsg(RunnerEvent):
    """A live point of an LR run (`event` is a RunUpdate)."""


class RecordUpdateMsg(RunnerEvent):
    """Extra record content: runs, variants, plan… (`event` is a RecordUpdate)."""


class RunnerErrorMsg(RunnerEvent):
    """A command failed outside any phase (`event` is a RunnerError)."""


WRAPPERS: dict[type[ev.WireMessage], type[RunnerEvent]] = {
    ev.PhaseStarted: PhaseStartedMsg,
    ev.PhaseProgress: PhaseProgressMsg,
    ev.PhaseFinished: PhaseFinishedMsg,
    ev.Counters: CountersMsg,
    ev.RunUpdate: RunUpdateMsg,
    ev.RecordUpdate: RecordUpdateMsg,
    ev.RunnerError: RunnerErrorMsg,
}


def wrap(event: ev.WireMessage) -> RunnerEvent | None:
    """The Textual message for a runner event, or None for events the UI does not show.

    Every string in it is made inert here, the one door through which runner text enters the
    app (R24): control characters escaped, length bounded.
    """
    cls = WRAPPERS.get(type(event))
    return cls(inert(event)) if cls else None


def inert(event: ev.WireMessage) -> ev.WireMessage:
    """A copy of `event` whose strings are `clean`ed (see `pilot_tui.core.text`)."""
    changes = {f.name: clean_tree(getattr(event, f.name)) for f in dataclasses.fields(event)}
    return dataclasses.replace(event, **changes)


class SessionReady(Message):
    """The runner started and the record file exists."""

    def __init__(self, record_path: Path, environment: dict) -> None:
        super().__init__()
        self.record_path = record_path
        self.environment = clean_tree(environment)


class SessionFailed(Message):
    """The runner could not start or restart; `reason` is one line, `dropped` the steps unqueued."""

    def __init__(self, reason: str, dropped: list[str] | None = None) -> None:
        super().__init__()
        self.reason = clean(reason)
        self.dropped = list(dropped or [])


class NoteWritten(Message):
    """A note or conclusion was written into the live record (`data`: its notes sections), or not."""

    def __init__(self, kind: str, data: dict, error: str = "") -> None:
        super().__init__()
        self.kind = kind
        self.data = clean_tree(data)
        self.error = clean(error)


class CampaignStopped(SessionFailed):
    """A phase whose failure stops the campaign failed (the phase table's fail-fast rule, as in
    headless): the queued steps were dropped."""


class RunnerIdle(Message):
    """The runner thread has no step left to run."""


class RecordSaved(Message):
    """`e`: the record was written to `path` (or why not)."""

    def __init__(self, path: Path | None, error: str = "") -> None:
        super().__init__()
        self.path = path
        self.error = clean(error)


class NvmlSampled(Message):
    """A fresh NVML snapshot for the Counters pane."""

    def __init__(self, snapshot: NvmlSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class CpuSampled(Message):
    """The runner process's CPU % and RSS and the system memory (`cpu.CpuProbe`), about once a second."""

    def __init__(self, sample: CpuSample) -> None:
        super().__init__()
        self.sample = sample
