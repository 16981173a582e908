"""Reports besides the tables: sample rollouts, trackers."""
