"""What a fresh process runs (`python -m pilot_tui.runner.workers.NAME`): the resumed side of the
resume check and the final reload, for the pilot's loop (`resume`, `reload`) and for a captured
trainer (`trainer_resume`, `trainer_reload`), and a trainer variant's fresh capture."""
