"""The rollout engine: batching, prefix reuse, servers, updates."""
