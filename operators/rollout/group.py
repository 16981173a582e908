"""A group: one prompt and its ``n`` samples in the continuous batcher, from submission until
every sample finished."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from operators.rollout.decoding import Prefill
from operators.rollout.sampling import Completion, SamplingParams
from operators.rollout.weight_update import VersionStarts

__all__ = ["Group", "filters"]


def filters(params: SamplingParams) -> bool:
    """Whether ``params`` restricts sampling with top-k or top-p."""
    return params.top_k > 0 or params.top_p < 1.0


@dataclass
class Group:
    """One prompt with its samples; ``results`` and ``versions`` are per decoded sample."""

    ticket: int
    prompt: list[int]
    params: SamplingParams
    key: int  # rng.group_key of the request seed and the prompt's index
    runs: int  # samples decoded (1 for greedy groups, whose result is copied n times)
    stop_ids: list[int]
    filters: bool  # uses top-k or top-p
    samples: bool  # not greedy
    cache_key: str | None = None  # keep the finished cache under this key (prefix_store.py)
    cached_tokens: int = 0  # prompt tokens taken from the cache kept under cache_key
    results: list[Completion | None] = field(default_factory=list)
    versions: list[VersionStarts] = field(default_factory=list)  # per sample, once admitted
    admitted: int = 0
    unfinished: int = 0
    prefix: tuple[Prefill, int] | None = None  # the prefill batch holding its prompt, and the row

    def completions(self) -> list[Completion]:
        """The group's ``n`` completions (a greedy group's one decoded sample, copied)."""
        if len(self.results) == self.params.n:
            return self.results
        c = self.results[0]
        return [
            dataclasses.replace(c, token_ids=list(c.token_ids), logprobs=list(c.logprobs))
            for _ in range(self.params.n)
        ]
