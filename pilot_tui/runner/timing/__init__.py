"""Time: steady's clock, stopping rule and data feed (`steady`), the fixed CPU workload that says
whether the machine's speed moved (`speed_reference`), a phase's deadline enforced while it runs."""
