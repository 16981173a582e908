"""The agent gateway: an OpenAI-compatible endpoint per episode on the rollout pool, serving a
user's own agent code, which owns nothing but its loop (the gateway owns the tokens)."""
