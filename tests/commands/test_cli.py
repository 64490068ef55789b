import pytest

from pilot_tui import __version__
from pilot_tui.commands.cli import main


def test_version_flag_prints_the_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"pilot-tui {__version__}"


def test_a_missing_campaign_is_bad_input(tmp_path, capsys):
    missing = tmp_path / "nope.toml"
    assert main(["run", str(missing), "--headless"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(missing) in err and "not found" in err
    assert not (tmp_path / "records").exists()
