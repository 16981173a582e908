"""Incremental stop-string detection for one sequence: decodes only the tail of its tokens."""

from __future__ import annotations

from typing import Any

__all__ = ["StopStrings", "cut_at_stop"]


def cut_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """Text before the earliest stop string (unchanged if none occurs)."""
    found = [i for i in (text.find(s) for s in stop) if i >= 0]
    return text[: min(found)] if found else text


class StopStrings:
    """Watches one sequence's generated tokens for any of ``stop``."""

    def __init__(self, tokenizer: Any, stop: tuple[str, ...]) -> None:
        self.tokenizer = tokenizer
        self.stop = stop
        # Enough tokens to cover the longest stop string even with byte-level pieces.
        self.window = 4 * max(len(s) for s in stop) + 4
        self.tokens: list[int] = []

    def feed(self, token: int) -> str | None:
        """Append one token; the stop string the decoded tail now contains, if any."""
        self.tokens.append(token)
        tail = self.tokenizer.decode(self.tokens[-self.window :], skip_special_tokens=True)
        for s in self.stop:
            if s in tail:
                return s
        return None
