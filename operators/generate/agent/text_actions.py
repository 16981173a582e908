"""Reading actions out of an assistant turn's text: what it said outside its ``<think>``
reasoning, and the integers in it (with their positions, so the last one said can win)."""

from __future__ import annotations

import re

THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
INTEGER = re.compile(r"-?\d+")


def visible_text(text: str) -> str:
    """The turn without its ``<think>...</think>`` blocks."""
    return THINK.sub("", text)


def integers(text: str) -> list[tuple[int, int]]:
    """(position, value) of every integer in `text`, in order."""
    return [(m.start(), int(m.group())) for m in INTEGER.finditer(text)]
