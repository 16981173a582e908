"""Terminal output: progress, trajectories, `rldag inspect`."""
