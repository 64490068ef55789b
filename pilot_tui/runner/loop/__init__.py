"""The pilot's own training loop: a configuration's state and its update (`training`), the data
order (`data`), the optimizers a campaign may name, checkpoints and exports, the replay inputs, what
serving reads, the resume's observations and edge cases, which states live on the device."""
