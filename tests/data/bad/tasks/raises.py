"""A task file whose factory raises (line 6)."""


def make_task():
    data_dir = "/nonexistent/data"
    raise FileNotFoundError(f"no dataset in {data_dir}")
