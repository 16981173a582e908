"""Score nodes: reward functions, reward calls and workers, the reward service."""
