"""Sampling parameters, completion records and next-token selection for rollout engines.

The log-prob reported for a sampled token is ``log_softmax(logits / temperature)`` at that token,
computed in float32 *before* top-k/top-p filtering, so a trainer that recomputes
``log_softmax(logits / T)`` on the same tokens gets the same number. Greedy decoding
(``temperature == 0``) reports ``log_softmax(logits)`` at the argmax token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Completion", "SamplingParams", "filter_logits", "sample_rows"]


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
    ignore_eos: bool = False  # keep decoding past eos (stop_token_ids still stop)

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
    finish_reason: str  # "stop", "length" or "abort"
    text: str | None = None  # decoded response (None without tokenizer); stop string cut off
    matched: int | str | None = None  # the stop token id or stop string that ended it
    # (first token index, weight version) of each version that generated its tokens, oldest
    # first (operators.rollout.weight_update); empty where the engine labels no versions
    versions: tuple[tuple[int, str], ...] = ()
    cached_tokens: int = 0  # prompt tokens whose keys/values came from the caller's kept cache


def filter_logits(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask (to -inf) logits outside each row's top-k set, then outside its top-p nucleus.

    ``scaled`` is ``(rows, vocab)`` temperature-scaled logits; ``top_k`` (int64, <= 0 = off) and
    ``top_p`` (float, 1 = off) hold one value per row. The nucleus is the smallest set of most
    likely tokens (after top-k) whose mass reaches ``top_p``; the top token is always kept.
    """
    vocab = scaled.shape[-1]
    use_k = (top_k > 0) & (top_k < vocab)
    use_p = top_p < 1.0
    if not bool((use_k | use_p).any()):
        return scaled
    ordered, order = torch.sort(scaled, dim=-1, descending=True)
    ranks = torch.arange(vocab, device=scaled.device).unsqueeze(0)
    drop = use_k.unsqueeze(-1) & (ranks >= top_k.unsqueeze(-1))
    ordered = ordered.masked_fill(drop, float("-inf"))
    probs = ordered.softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs
    drop = use_p.unsqueeze(-1) & (mass_before >= top_p.unsqueeze(-1))
    ordered = ordered.masked_fill(drop, float("-inf"))
    return torch.full_like(scaled, float("-inf")).scatter(-1, order, ordered)


def sample_rows(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    u: torch.Tensor,
    *,
    filtering: bool = True,
    sampling: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row of ``logits`` ``(rows, vocab)``; return ``(tokens, logprobs)``.

    Every argument after ``logits`` has one entry per row, so rows of one batch may use different
    sampling parameters. Rows with temperature 0 take the argmax. Others draw by inverse CDF, in
    vocabulary order, at their uniform ``u`` (``rng.uniforms``): a row's token depends only on its
    own logits, parameters and ``u``, never on the other rows. Log-probs ignore top-k/top-p (see
    the module docstring). ``filtering=False`` promises no row uses top-k/top-p and
    ``sampling=False`` that every row is greedy; both only skip work.
    """
    logits = logits.float()
    greedy = temperature == 0
    if not sampling:
        logprobs = torch.log_softmax(logits, dim=-1)
        tokens = logprobs.argmax(dim=-1)
        return tokens, logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    scaled = logits / torch.where(greedy, 1.0, temperature).unsqueeze(-1)
    logprobs = torch.log_softmax(scaled, dim=-1)
    kept = filter_logits(scaled, top_k, top_p) if filtering else scaled
    cdf = kept.softmax(dim=-1).cumsum_(dim=-1)
    target = (u * cdf[:, -1]).unsqueeze(-1)
    sampled = torch.searchsorted(cdf, target).squeeze(-1).clamp_(max=logits.shape[-1] - 1)
    tokens = torch.where(greedy, logprobs.argmax(dim=-1), sampled)
    return tokens, logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
