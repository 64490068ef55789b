"""Phase bodies, registered by name. Importing this package registers every module in it."""

import importlib
import pkgutil

from .base import PHASES, execute

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["PHASES", "execute"]
