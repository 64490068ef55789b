"""A training package launched by its console command: `tinytrain train config.json`."""
