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


def test_an_agent_with_a_bad_campaign_or_endpoint_is_one_line_and_exit_2(tmp_path, capfd):
    """`pilot-tui agent` on another node: the mistake is named before any connection is tried."""
    import tomli_w
    from conftest import demo_raw

    good = tmp_path / "campaign.toml"
    good.write_text(tomli_w.dumps(demo_raw()))
    bad = tmp_path / "bad.toml"
    bad.write_text("[batch]\nmicrobatch = 0\n")
    assert main(["agent", str(bad), "--rdzv", "127.0.0.1:29400"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.toml" in err[0], err
    assert main(["agent", str(good), "--rdzv", "node0"]) == 2  # its correct twin, but no port
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--rdzv 'node0': must be host:port" in err[0], err
