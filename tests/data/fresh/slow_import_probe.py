"""A module that takes seconds to import: a template process preloading it is not ready for that
long (tests/runner/test_template.py: steady's wait for it says so)."""

import time

time.sleep(3.5)
