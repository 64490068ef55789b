"""A task file with a Python syntax error on line 4 (a missing closing parenthesis)."""


def make_task(:
    return None
