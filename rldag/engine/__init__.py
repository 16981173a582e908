"""The one loop: the scheduler, a run (execute and persist a step), streams, events, checkpoints,
metrics."""
