"""A task file that imports a module the machine does not have (line 3)."""

import pilot_missing_extension_module  # noqa: F401


def make_task():
    raise AssertionError("never reached: the import fails first")
