"""A task file whose factory returns a plain dict instead of a pilot_tui Task."""


def make_task():
    return {"name": "not-a-task", "examples": []}
