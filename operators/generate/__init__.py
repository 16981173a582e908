"""Generate nodes: n samples per prompt from the policy, and the multi-turn agent loop."""
