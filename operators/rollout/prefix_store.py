"""Keys and values of finished sequences, kept under the caller's key for its next request.

A multi-turn caller (an agent episode) sends each turn's context again with the previous turn
and the environment's answer appended. Its previous sequence's cache is kept here when it
finishes (``keep``) and taken on its next submission (``take``); only the tokens the new prompt
shares with the kept ones are reused, so a kept entry can never change what is computed, only
skip recomputing it. Memory is bounded: the least recently kept entries are evicted beyond
``max_tokens`` tokens, a caller drops its entry when it is done (``drop``), and new weights
clear everything (the kept values were computed under the old ones).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

__all__ = ["Kept", "PrefixStore", "shared_prefix"]


@dataclass
class Kept:
    """The cache of one finished sequence."""

    tokens: list[int]  # the ids whose keys/values are kept (prompt and sampled, but the last)
    kv: list[torch.Tensor]  # per layer (len(tokens), 2, kv_heads, head_dim)


def shared_prefix(a: list[int], b: list[int]) -> int:
    """How many leading ids ``a`` and ``b`` have in common."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    return next(i for i in range(n) if a[i] != b[i])


class PrefixStore:
    """Kept caches by key, least recently kept first; at most ``max_tokens`` tokens in all."""

    def __init__(self, max_tokens: int = 1 << 16) -> None:
        self.max_tokens = max_tokens
        self._kept: OrderedDict[str, Kept] = OrderedDict()
        self.tokens = 0  # tokens held now

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, key: str, kept: Kept) -> None:
        """Keep ``kept`` under ``key`` (replacing what was there), evicting the oldest entries
        beyond ``max_tokens``; an entry larger than that is not kept."""
        self.drop(key)
        if len(kept.tokens) > self.max_tokens:
            return
        self._kept[key] = kept
        self.tokens += len(kept.tokens)
        while self.tokens > self.max_tokens:
            _, old = self._kept.popitem(last=False)
            self.tokens -= len(old.tokens)

    def take(self, key: str) -> Kept | None:
        """The entry under ``key``, removed from the store (None when there is none)."""
        kept = self._kept.pop(key, None)
        if kept is not None:
            self.tokens -= len(kept.tokens)
        return kept

    def drop(self, key: str) -> None:
        self.take(key)

    def clear(self) -> None:
        self._kept.clear()
        self.tokens = 0
