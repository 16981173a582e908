"""The arithmetic task: every single-digit addition ``a+b=`` with its answer.

A problem's prompt is ``f"{a}+{b}="`` (e.g. ``"3+5="``) and its answer is the decimal sum
(e.g. ``"8"``); a model is expected to emit the answer digits and then EOS. There are exactly
100 distinct problems (``a, b`` in ``0..9``), indexed ``10 * a + b``.
"""

from __future__ import annotations

from dataclasses import dataclass

DATA_SOURCE = "arithmetic"
PROMPT_FORMAT = "{a}+{b}="


@dataclass(frozen=True)
class Problem:
    """One addition problem: its operands, prompt text, answer text and stable index."""

    a: int
    b: int

    @property
    def index(self) -> int:
        return 10 * self.a + self.b

    @property
    def prompt(self) -> str:
        return PROMPT_FORMAT.format(a=self.a, b=self.b)

    @property
    def answer(self) -> str:
        return str(self.a + self.b)

    @property
    def ground_truth(self) -> str:
        """What the reward compares the response with."""
        return self.answer


def all_problems() -> list[Problem]:
    """All 100 problems in index order (``0+0=`` ... ``9+9=``)."""
    return [Problem(a, b) for a in range(10) for b in range(10)]


def corpus_lines() -> list[str]:
    """The text the tokenizer is trained on: every prompt followed by its answer."""
    return [p.prompt + p.answer for p in all_problems()]
