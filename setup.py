"""The demo campaigns have one copy, `campaigns/` at the top of the checkout, readable where the
README points; the wheel ships it as `pilot_tui/campaigns` so a non-editable install runs the demo.
(pyproject.toml alone cannot add a package that lives outside the package folder.)"""

from setuptools import find_namespace_packages, setup

setup(
    # Namespace packages too (runner/distributed has no __init__.py), as pyproject's find did.
    packages=[
        *find_namespace_packages(include=["pilot_tui", "pilot_tui.*"], exclude=["*.__pycache__"]),
        "pilot_tui.campaigns",
    ],
    package_dir={"pilot_tui.campaigns": "campaigns"},
)
