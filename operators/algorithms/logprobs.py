"""Per-token log-probs and entropy of a model's logits (shapes [batch, tokens, vocab] ->
[batch, tokens]), at a sampling temperature."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def token_logprobs(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """log p(token) under softmax(logits / temperature), gathered at `tokens`."""
    logp = F.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Per-token entropy of softmax(logits / temperature)."""
    logp = F.log_softmax(logits.float() / temperature, dim=-1)
    return -(logp.exp() * logp).sum(-1)
