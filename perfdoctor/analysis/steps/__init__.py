"""Training steps: where they are, which are complete, cold or steady, and the step-time series' phases."""
