"""The loop: the scheduler, a run's steps and stops, metrics."""
