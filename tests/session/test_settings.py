"""The session's settings: typed, read from `PILOT_TUI_*` when a session starts, refused in one line."""

from __future__ import annotations

import pytest

from pilot_tui.commands.cli import main
from pilot_tui.session.driver import BadInputError, Session
from pilot_tui.session.settings import Settings, SettingsError, env_name


def test_defaults_and_every_field_from_its_variable():
    assert Settings.from_env({}) == Settings()
    env = {env_name(name): str(float(i + 1)) for i, name in enumerate(Settings.__dataclass_fields__)}
    read = Settings.from_env(env | {"HOME": "/root", "PILOT_TUIX": "ignored: not the prefix"})
    assert read.described() == {var: float(text) for var, text in env.items()}
    assert Settings.from_env({"PILOT_TUI_SILENCE_S": "300"}).silence_s == 300.0


@pytest.mark.parametrize(
    ("var", "text", "fragment"),
    [
        ("PILOT_TUI_SILENCE_S", "2min", "PILOT_TUI_SILENCE_S: expected a number of seconds, got '2min'"),
        ("PILOT_TUI_SILENCE_S", "0", "PILOT_TUI_SILENCE_S: must be a finite number of seconds > 0"),
        ("PILOT_TUI_OPEN_TIMEOUT_S", "inf", "PILOT_TUI_OPEN_TIMEOUT_S: must be a finite number"),
        ("PILOT_TUI_SILENCE", "300", "PILOT_TUI_SILENCE: not a setting (did you mean PILOT_TUI_SILENCE_S?"),
    ],
)
def test_a_bad_value_or_an_unknown_name_is_one_line_naming_the_variable(var, text, fragment):
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({var: text})
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_a_session_reads_the_environment_when_it_starts_not_at_import(write_campaign, monkeypatch, tmp_path):
    path = write_campaign()
    monkeypatch.setenv("PILOT_TUI_SILENCE_S", "7")
    assert Session(path, tmp_path / "records").settings.silence_s == 7.0
    monkeypatch.setenv("PILOT_TUI_SILENCE_S", "9")
    session = Session(path, tmp_path / "records")
    assert session.settings.silence_s == 9.0
    assert session.hang_watchdog.grace_s == session.settings.hung_grace_s
    given = Settings(cancel_grace_s=0.5)
    assert Session(path, tmp_path / "records", settings=given).settings is given
    monkeypatch.setenv("PILOT_TUI_SILENCE_S", "soon")
    with pytest.raises(BadInputError, match="PILOT_TUI_SILENCE_S"):
        Session(path, tmp_path / "records")


def test_the_cli_refuses_a_bad_setting_with_exit_2_and_writes_nothing(
    write_campaign, monkeypatch, tmp_path, capsys
):
    path = write_campaign()
    records = tmp_path / "records"
    monkeypatch.setenv("PILOT_TUI_OPEN_TIMEOUT", "60")
    assert main(["run", str(path), "--headless", "--records", str(records)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "PILOT_TUI_OPEN_TIMEOUT: not a setting" in err
    assert not records.exists()


def test_docs_settings_lists_every_setting_with_its_default():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "settings.md").read_text()
    for var, default in Settings().described().items():
        assert f"| `{var}` | `{default:g}` |" in text, var
