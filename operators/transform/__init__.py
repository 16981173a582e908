"""Transform nodes: advantages, dynamic sampling, reward shaping (KL, overlong)."""
