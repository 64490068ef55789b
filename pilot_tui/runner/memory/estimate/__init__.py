"""The fake-tensor memory estimate: one update and one evaluation of each configuration under fake
tensors (`fake_run`), from a task or a Hugging Face config (`sources`), for a campaign (`campaign`)."""
