"""Score nodes: reward functions, reward calls and workers, the reward service."""

from rldag.config.moved import forward

# The names of the module this package replaced, with a warning naming the new path.
__getattr__ = forward(__name__, "operators.score.reward_function")
