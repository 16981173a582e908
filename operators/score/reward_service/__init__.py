"""The reward service: reward models, LLM judges, remote verifiers and composed rewards as
score and transform nodes (each on the pool its node names)."""
