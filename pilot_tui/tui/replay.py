"""Record a runner's event stream, and replay it into the dashboard without a runner.

A recording is a JSON-lines file of the wire protocol exactly as it crossed the pipe: the commands
sent (`open`, `run`) and every event received. `ReplaySession` is a `Session` whose pipe is that
file, so the record is built by the same code as in a live run; tests and screenshots hand it to
the App's constructor (the injected data source) for deterministic frames.
"""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path
from typing import Any, TextIO

from .. import events as ev
from ..session import Session


class RecordingSession(Session):
    """A live Session that also writes every command and event it exchanges to `stream`."""

    def __init__(self, spec_path: str | Path, records_dir: str | Path | None, stream: TextIO) -> None:
        super().__init__(spec_path, records_dir)
        self._stream = stream
        stream.write(json.dumps({"kind": "recording", "record_id": self.record_id}) + "\n")

    def _send(self, msg: ev.Message) -> None:
        if isinstance(msg, ev.OpenCampaign | ev.RunStep | ev.Cancel):
            self._stream.write(msg.to_json() + "\n")
        super()._send(msg)

    def _next(self) -> ev.Message | None:
        msg = super()._next()
        if msg is not None:
            self._stream.write(msg.to_json() + "\n")
        return msg


class ReplaySession(Session):
    """A Session fed from a recording: same steps, same record code, no process, no torch.

    `delay_s` spaces the events out (for demos); 0 replays as fast as the UI takes them.
    """

    def __init__(
        self,
        spec_path: str | Path,
        recording: str | Path,
        records_dir: str | Path | None = None,
        delay_s: float = 0.0,
    ) -> None:
        super().__init__(spec_path, records_dir)
        self.delay_s = delay_s
        self._opening: list[str] = []
        self._by_step: dict[str, list[list[str]]] = collections.defaultdict(list)
        self._pending: collections.deque[str] = collections.deque()
        self._cancelled = False
        self._load(Path(recording))

    def _load(self, path: Path) -> None:
        group: list[str] | None = self._opening
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            data: dict[str, Any] = json.loads(line)
            kind = data.get("kind")
            if kind == "recording":
                # The recorded id, so a replayed record has the same name as the original.
                self.record_id = str(data["record_id"])
                self.work_dir = self.records_dir / f"{self.spec.campaign.name}-{self.record_id}"
            elif kind == "open":
                group = self._opening
            elif kind == "run":
                group = []
                self._by_step[data["step"]].append(group)
            elif kind == "cancel":
                continue
            elif group is not None:
                group.append(line)

    # The pipe, replaced by the recording.
    def _spawn(self) -> None:
        self._proc = None

    def _restart(self) -> None:
        pass

    def _send(self, msg: ev.Message) -> None:
        if isinstance(msg, ev.OpenCampaign):
            self._pending.extend(self._opening)
        elif isinstance(msg, ev.RunStep):
            self._cancelled = False
            groups = self._by_step.get(msg.step)
            if groups:
                # Re-running a step replays its next recorded attempt (or the last one again).
                lines = groups.pop(0) if len(groups) > 1 else groups[0]
                self._pending.extend(lines)
            else:
                self._pending.append(ev.RunnerError(message=f"no recorded events for {msg.step!r}").to_json())
                self._pending.append(ev.Idle().to_json())
        elif isinstance(msg, ev.Cancel):
            self._cancelled = True

    def _next(self) -> ev.Message | None:
        if not self._pending:
            return None
        if self.delay_s:
            time.sleep(self.delay_s)
        msg = ev.decode(self._pending.popleft())
        if self._cancelled and isinstance(msg, ev.PhaseProgress):
            # Skip to the end of the step, as a cancelled runner would.
            while self._pending and isinstance(ev.decode(self._pending[0]), ev.PhaseProgress):
                self._pending.popleft()
        return msg

    def run_step(self, key: str, overrides: dict[str, Any] | None = None):
        if self.record is None:
            raise RuntimeError("start() the session first")
        self._send(ev.RunStep(step=key, overrides=dict(overrides or {})))
        while self._pending:
            msg = self._next()
            assert msg is not None
            if isinstance(msg, ev.PhaseFinished):
                self.record.append("phases", msg.row)
                self.record.save()
            elif isinstance(msg, ev.RecordUpdate):
                msg = self.apply_update(msg)
            if isinstance(msg, ev.Idle):
                return
            yield msg

    def cancel(self) -> None:
        self._send(ev.Cancel())

    def close(self, timeout: float = 5.0) -> None:
        self._pending.clear()

    @property
    def runner_pid(self) -> int | None:
        return None
