"""Reward functions, one module per task, each exposing veRL's ``compute_score``."""

from operators.score.rewards.arithmetic import compute_score as arithmetic_score

__all__ = ["arithmetic_score"]
