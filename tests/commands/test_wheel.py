"""The wheel, as a non-editable install gets it: the one copy of the demo campaigns inside, no
records, and the demo found from the installed package."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_ships_the_demo_campaigns_and_no_records(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "pilot_tui", src / "pilot_tui", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "campaigns", src / "campaigns", ignore=shutil.ignore_patterns("__pycache__"))
    (src / "campaigns" / "records" / "left-behind.toml").write_text("x = 1\n")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = tmp_path.glob("pilot_tui-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n.split("/")[-1] for n in names if n.startswith("pilot_tui/campaigns/"))
    readable = sorted(p.name for p in (ROOT / "campaigns").iterdir() if p.suffix in (".toml", ".py"))
    assert shipped == readable and "demo.toml" in shipped
    assert not [n for n in names if "records" in n.split("/")]
    assert "pilot_tui/tui/app.tcss" in names
    # Every module of the source tree is in the wheel (a folder without __init__.py included).
    source = {
        str(p.relative_to(ROOT)) for p in (ROOT / "pilot_tui").rglob("*.py") if "__pycache__" not in p.parts
    }
    assert source - set(names) == set()
    assert not [n for n in names if "__pycache__" in n]

    # Installed (unpacked on the path, outside any checkout): the demo is the packaged copy and its
    # records go to the working folder, never into the install.
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    work = tmp_path / "work"
    work.mkdir()
    probe = (
        "import json, pilot_tui as p; print(json.dumps([str(p.DEMO_CAMPAIGN), "
        "str(p.default_records_dir(p.DEMO_CAMPAIGN))]))"
    )
    res = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=work,
        env={"PYTHONPATH": str(site)},
        timeout=60,
    )
    demo, records = json.loads(res.stdout)
    assert demo == str(site / "pilot_tui" / "campaigns" / "demo.toml")
    assert records == str(work / "records")
