"""pilot-tui: pilot a PyTorch training campaign on a small scale before renting GPUs for days."""

from pathlib import Path

__version__ = "0.1.0"

# The demo campaigns live beside the package in a source checkout (installed with `pip install -e .`).
CAMPAIGNS_DIR = Path(__file__).resolve().parent.parent / "campaigns"
DEMO_CAMPAIGN = CAMPAIGNS_DIR / "demo.toml"
