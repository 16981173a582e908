"""What a run shows besides its tables: the reward curve, sample rollouts and trajectories,
experiment trackers."""
