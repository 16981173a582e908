"""The policy model's plumbing shared by generate, rollout, score and train: loading, LoRA weights,
prompts, tokenizer checks."""
