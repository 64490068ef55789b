"""Analyses every gate reads, whoever owns the training: the examples as the loss sees them
(`inspection/`, by kind of task), forward and loss by task kind (`objective`), the objective's
checks (`objective_checks`), what a tiny subset allows (`achievable`), finiteness first."""
