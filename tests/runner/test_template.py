"""Fresh processes forked from the template: imports paid once, nothing of the runner inherited.

The resume check's process C must know only its command line and its files (R15). A planted
in-memory state of "run A" — an attribute on torch, torch's RNG seeded — in the process that
asks for C must not reach C; nor may what one child plants reach the next. A plain `python -m`
process is the reference each figure is compared with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pilot_tui.core.launch import LAUNCHER_ENV
from pilot_tui.runner.processes import template
from pilot_tui.runner.processes.fresh_process import start_fresh_process

PROBE_DIR = Path(__file__).resolve().parents[1] / "data" / "fresh"


@pytest.fixture
def warm_template(monkeypatch: pytest.MonkeyPatch):
    # The suite's own warm launcher (tests/warm/) stands in for the template elsewhere: not here.
    monkeypatch.delenv(LAUNCHER_ENV, raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(PROBE_DIR), os.environ.get("PYTHONPATH", "")]))
    tmpl = template.warm()
    assert tmpl is not None
    yield tmpl
    template.close()


def _probe(out: Path, plant: str = "") -> tuple[dict, str]:
    out.mkdir(parents=True, exist_ok=True)
    worker = start_fresh_process("fresh_probe", [str(out), *([plant] if plant else [])], out)
    result, _ = worker.wait(timeout_s=120)
    return result, worker.how


def _plain(out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(PROBE_DIR))
    subprocess.run([sys.executable, "-m", "fresh_probe", str(out)], check=True, env=env)
    return json.loads((out / "result.json").read_text())


def test_a_planted_state_of_run_a_does_not_reach_process_c(warm_template, tmp_path: Path) -> None:
    state = torch.get_rng_state()
    torch._planted_by_a_run = "run A"  # type: ignore[attr-defined]
    torch.manual_seed(1234)
    try:
        first, how = _probe(tmp_path / "c1", plant="child one")
        second, how_again = _probe(tmp_path / "c2")
    finally:
        del torch._planted_by_a_run  # type: ignore[attr-defined]
        torch.set_rng_state(state)
    plain = _plain(tmp_path / "plain")
    assert how == how_again == "template"
    assert first["ppid"] == second["ppid"] == warm_template.proc.pid != os.getpid()
    # Neither the runner's plant nor the first child's reaches a child: each starts from the template.
    assert first["planted"] is None and second["planted"] is None
    # A new interpreter seeds torch and numpy from the OS: so does each child (not the runner's
    # seed, not the template's shared one, not child one's).
    assert plain["torch_seed"] != first["torch_seed"] != second["torch_seed"] != 1234
    assert first["torch_draw"] != second["torch_draw"]
    assert first["numpy_draw"] != second["numpy_draw"]
    assert first["cwd"] == os.getcwd()


def test_a_child_starts_without_paying_the_imports_again(warm_template, tmp_path: Path) -> None:
    # What steady waits on before it times anything (phases/steady.py).
    assert warm_template.wait_ready(120) and warm_template.ready() and not warm_template.failed
    t0 = time.monotonic()
    child, _ = _probe(tmp_path / "warm")
    forked = time.monotonic() - t0
    t0 = time.monotonic()
    plain = _plain(tmp_path / "plain")
    plain_s = time.monotonic() - t0
    # torch is imported in the template: the fork skips what the plain process pays (~1-2 s here).
    assert forked < plain_s, (forked, plain_s)
    # Nor do its full collections walk those imports (a trainer's train() runs one): the template
    # froze them before forking (runner/memory/heap.py). A plain process has nothing frozen.
    assert child["frozen"] > 10_000 and plain["frozen"] == 0, (child["frozen"], plain["frozen"])


def test_a_failing_child_reports_its_code_and_its_last_line(warm_template, tmp_path: Path) -> None:
    from pilot_tui.runner.processes.fresh_process import FreshProcessFailed

    worker = start_fresh_process("pilot_tui.runner.workers.resume", ["--no-such-flag"], tmp_path)
    assert worker.how == "template"
    with pytest.raises(FreshProcessFailed) as failed:
        worker.wait(timeout_s=60)
    assert failed.value.code == 2 and "required" in str(failed.value)


def test_without_a_template_a_fresh_process_starts_the_plain_way(tmp_path: Path, monkeypatch) -> None:
    template.close()
    monkeypatch.delenv(LAUNCHER_ENV, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(PROBE_DIR))
    result, how = _probe(tmp_path / "plain")
    assert how == "exec" and result["ppid"] == os.getpid()


def test_steady_waits_for_the_templates_imports_and_says_so(monkeypatch, tmp_path: Path) -> None:
    # A template still importing (a module that takes 3.5 s): steady's timed updates wait for it,
    # and the step's line says what it waits for, with the seconds, past 2 s.
    from types import SimpleNamespace

    from pilot_tui.core.events import PhaseProgress
    from pilot_tui.core.steps import Step
    from pilot_tui.runner.phases.steady import template_settled

    monkeypatch.delenv(LAUNCHER_ENV, raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(PROBE_DIR), os.environ.get("PYTHONPATH", "")]))
    template.close()
    slow = template.Template(["slow_import_probe"])
    monkeypatch.setattr(template, "_TEMPLATE", slow)
    events: list = []
    try:
        template_settled(SimpleNamespace(emit=events.append), Step.of("first_step"))
        assert not slow.ready()  # only steady waits
        template_settled(SimpleNamespace(emit=events.append), Step.of("steady"))
        assert slow.ready() and not slow.failed
    finally:
        slow.close()
    said = [e.message for e in events if isinstance(e, PhaseProgress) and e.step == "steady"]
    assert said and all(
        m.startswith("waiting for the template process's imports before timing (") for m in said
    )
    seconds = [int(m.rsplit("(", 1)[1].removesuffix(" s)")) for m in said]
    assert seconds == sorted(seconds) and seconds[0] >= 2, said
