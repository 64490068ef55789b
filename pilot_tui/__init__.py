"""pilot-tui: pilot a PyTorch training campaign on a small scale before renting GPUs for days."""

from pathlib import Path

__version__ = "0.1.0"

# The demo campaigns have one copy, `campaigns/` at the top of a checkout (used there, with its
# `records/` folder beside it); the wheel ships that folder as `pilot_tui/campaigns/` (setup.py), so
# a plain `pip install .` can run them.
PACKAGED_CAMPAIGNS = Path(__file__).resolve().parent / "campaigns"
_CHECKOUT_CAMPAIGNS = Path(__file__).resolve().parent.parent / "campaigns"
CAMPAIGNS_DIR = _CHECKOUT_CAMPAIGNS if (_CHECKOUT_CAMPAIGNS / "demo.toml").is_file() else PACKAGED_CAMPAIGNS
DEMO_CAMPAIGN = CAMPAIGNS_DIR / "demo.toml"


def default_records_dir(campaign: Path) -> Path:
    """`<campaign dir>/records`; for a campaign shipped inside the installed package, `./records`
    (an install folder is no place for a user's records, and may not be writable)."""
    folder = Path(campaign).resolve().parent
    if folder == PACKAGED_CAMPAIGNS:
        return Path.cwd() / "records"
    return folder / "records"
