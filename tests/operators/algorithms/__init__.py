"""The RL math by name: estimators, losses, KL, GAE."""
