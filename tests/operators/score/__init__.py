"""Score nodes: reward functions and workers, judges, reward models."""
