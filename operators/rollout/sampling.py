"""Sampling parameters, completion records and next-token selection for rollout engines.

The log-prob reported for a sampled token is ``log_softmax(logits / temperature)`` at that token,
computed in float32 *before* top-k/top-p filtering, so a trainer that recomputes
``log_softmax(logits / T)`` on the same tokens gets the same number. Greedy decoding
(``temperature == 0``) reports ``log_softmax(logits)`` at the argmax token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Completion", "SamplingParams", "filter_logits", "select_next_tokens"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample completions for a batch of prompts (vLLM-like field names)."""

    n: int = 1  # samples per prompt
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = -1  # -1 or 0 = off
    max_new_tokens: int = 16
    stop: tuple[str, ...] = ()  # stop strings (need a tokenizer)
    stop_token_ids: tuple[int, ...] = ()  # in addition to the eos token(s)
    seed: int | None = None

    def __post_init__(self) -> None:
        # Accept lists (e.g. from YAML) or a single string and store tuples so params stay hashable.
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        object.__setattr__(self, "stop", stop)
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < -1:
            raise ValueError(f"top_k must be -1, 0 or positive, got {self.top_k}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if any(not s for s in stop):
            raise ValueError("stop strings must be non-empty")

    @property
    def greedy(self) -> bool:
        """True when decoding takes the argmax (temperature 0)."""
        return self.temperature == 0


@dataclass
class Completion:
    """One sampled response to a prompt."""

    token_ids: list[int]  # generated tokens; includes the eos/stop token that ended it
    logprobs: list[float]  # log-prob of each sampled token, same length as token_ids
    finish_reason: str  # "stop" or "length"
    text: str | None = None  # decoded response (None without tokenizer); stop string cut off


def filter_logits(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask (to -inf) logits outside the top-k set and outside the top-p nucleus.

    ``scaled`` is ``(batch, vocab)`` temperature-scaled logits. The nucleus is the smallest set of
    most likely tokens whose probability mass reaches ``top_p``; the top token is always kept.
    """
    vocab = scaled.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs
        sorted_logits = sorted_logits.masked_fill(mass_before >= top_p, float("-inf"))
        scaled = torch.full_like(scaled, float("-inf")).scatter(-1, order, sorted_logits)
    return scaled


def select_next_tokens(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row of ``logits`` ``(batch, vocab)``; return ``(tokens, logprobs)``.

    Sampling draws from ``generator`` (on the logits' device) so a seeded generator makes the
    result reproducible. Log-probs ignore top-k/top-p (see the module docstring).
    """
    logits = logits.float()
    if params.greedy:
        logprobs = torch.log_softmax(logits, dim=-1)
        tokens = logprobs.argmax(dim=-1)
    else:
        scaled = logits / params.temperature
        logprobs = torch.log_softmax(scaled, dim=-1)
        probs = filter_logits(scaled, params.top_k, params.top_p).softmax(dim=-1)
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return tokens, logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
