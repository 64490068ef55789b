"""Phase bodies, registered by name. Importing this package registers every module in it, then
checks the bodies against the phase table: a phase without a body, or a body without an entry,
stops the runner at start rather than leaving a silent gap in a campaign."""

import importlib
import pkgutil

from ...core import phase_table
from .base import PHASES, execute

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

phase_table.check_registry(set(PHASES))

__all__ = ["PHASES", "execute"]
