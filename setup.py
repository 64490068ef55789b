"""The demo campaigns have one copy, `campaigns/` at the top of the checkout, readable where the
README points; the wheel ships it as `pilot_tui/campaigns` so a non-editable install runs the demo.
(pyproject.toml alone cannot add a package that lives outside the package folder.)"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["pilot_tui", "pilot_tui.*"]), "pilot_tui.campaigns"],
    package_dir={"pilot_tui.campaigns": "campaigns"},
)
