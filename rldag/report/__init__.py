"""What a run shows besides its tables: the reward curve, sample rollouts and trajectories,
experiment trackers."""

from rldag.config.moved import forward

# The names of the module this package replaced, with a warning naming the new path.
__getattr__ = forward(__name__, "rldag.report.rollouts")
