"""The report in a real headless browser (the system's Chromium, driven by its command line):
drawn with one curve per run and the decision first, no request leaving the page, and a hostile
record's report running no script — even with its content security policy taken out.

Skipped, saying so, where no Chromium is installed (`apt-get install chromium`, or set
PILOT_TUI_CHROMIUM to the browser's path).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from reading import parse
from test_report_html import recorded_runs

from pilot_tui.commands.cli import main

RECORD = Path(__file__).resolve().parent.parent / "tui" / "data" / "record.toml"
BROWSER = os.environ.get("PILOT_TUI_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    BROWSER is None,
    reason="no Chromium on this machine (apt-get install chromium, or set PILOT_TUI_CHROMIUM)",
)
PWNED = "PWNED"
SCRIPTED = f"<script>document.title='{PWNED}'</script><img src=x onerror=\"document.title='{PWNED}'\">"


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    return tomllib.loads(RECORD.read_text())


def browse(page: Path, tmp_path: Path, *action: str) -> tuple[str, list[str]]:
    """Open `page` headless with the network cut (no name resolves; every request goes to a dead
    proxy); returns stdout and the URLs the page itself asked for (from Chromium's net log)."""
    netlog = tmp_path / f"net-{len(list(tmp_path.glob('net-*')))}.json"
    cmd = [
        str(BROWSER),
        "--headless=new",
        "--no-sandbox",  # CI containers run as root
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--proxy-server=http://127.0.0.1:9",
        f"--log-net-log={netlog}",
        "--window-size=1200,2400",
        *action,
        page.as_uri(),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, page_requests(netlog)


def page_requests(netlog: Path) -> list[str]:
    """URLs of requests a page started: the browser's own (updates, time sync) carry no origin."""
    log = json.loads(netlog.read_text())
    kinds = log["constants"]["logEventTypes"]
    out = []
    for event in log["events"]:
        params = event.get("params") or {}
        if event["type"] != kinds["URL_REQUEST_START_JOB"] or "url" not in params:
            continue
        if params.get("initiator") == "not an origin" or params["url"].startswith(("file:", "data:")):
            continue
        out.append(params["url"])
    return out


def make_report(tmp_path: Path, data: dict[str, Any], name: str = "report.html") -> Path:
    src = tmp_path / "record.toml"
    src.write_text(tomli_w.dumps(data))
    out = tmp_path / name
    assert main(["report", str(src), "-o", str(out)]) == 0
    return out


def test_the_report_draws_offline_with_a_curve_per_run(tmp_path: Path, data) -> None:
    page = make_report(tmp_path, data)
    shot = tmp_path / "report.png"
    _, asked = browse(page, tmp_path, f"--screenshot={shot}")
    assert asked == []
    assert shot.stat().st_size > 20_000  # a page with tables and plots, not a blank one
    dom, asked = browse(page, tmp_path, "--dump-dom")
    assert asked == []
    loaded = parse(dom)
    assert loaded.all("section")[0].attrs["id"] == "decision"
    assert [e.attrs["data-run"] for e in loaded.all("polyline")] == recorded_runs(data)


def test_the_request_check_does_see_a_page_that_fetches(tmp_path: Path) -> None:
    # What the check above would catch: an image from the network.
    page = tmp_path / "fetches.html"
    page.write_text('<!DOCTYPE html><p>x</p><img src="http://example.invalid/a.png">')
    _, asked = browse(page, tmp_path, "--dump-dom")
    assert asked == ["http://example.invalid/a.png"]


def test_a_hostile_record_runs_no_script(tmp_path: Path, data) -> None:
    bad = copy.deepcopy(data)
    for row in bad["phases"]:
        row["reason"] = SCRIPTED + row["reason"]
    bad["runs"][0]["id"] = SCRIPTED
    bad["notes"] = [{"target": SCRIPTED, "text": SCRIPTED, "time": ""}]
    page = make_report(tmp_path, bad)
    # The escaping alone must hold: the page's policy (no script) is taken out for this test.
    html = page.read_text()
    policy = html[html.index('<meta http-equiv="Content-Security-Policy"') :]
    page.write_text(html.replace(policy[: policy.index(">") + 1], ""))
    assert "Content-Security-Policy" not in page.read_text()
    dom, asked = browse(page, tmp_path, "--dump-dom")
    loaded = parse(dom)
    assert not loaded.all("script") and not loaded.all("img")
    assert "<title>pilot-tui report · demo</title>" in dom and asked == []
    # The same text unescaped does run here: the check above can see a script that ran.
    raw = tmp_path / "raw.html"
    raw.write_text(f"<!DOCTYPE html><title>ok</title><p>{SCRIPTED}</p>")
    dom, _ = browse(raw, tmp_path, "--dump-dom")
    assert f"<title>{PWNED}</title>" in dom
