"""The command of every process pilot-tui starts for itself (core/launch.py)."""

from __future__ import annotations

import sys

from pilot_tui.core.launch import LAUNCHER_ENV, module_command, torchrun_script


def test_without_a_launcher_it_is_plain_python_dash_m(monkeypatch) -> None:
    monkeypatch.delenv(LAUNCHER_ENV, raising=False)
    assert module_command("pkg.mod", ["--a", "b c"]) == [sys.executable, "-m", "pkg.mod", "--a", "b c"]
    assert torchrun_script("pkg.rank") == ["-m", "pkg.rank"]


def test_a_launcher_takes_the_place_of_python_dash_m_and_torchrun_starts_it_as_it_is(monkeypatch) -> None:
    monkeypatch.setenv(LAUNCHER_ENV, "/opt/py -S '/a dir/launch.py'")
    assert module_command("pkg.mod", ["x"]) == ["/opt/py", "-S", "/a dir/launch.py", "pkg.mod", "x"]
    assert torchrun_script("pkg.rank") == ["--no-python", "/opt/py", "-S", "/a dir/launch.py", "pkg.rank"]
