"""Multi-digit addition written out digit by digit: the long chain-of-thought task's problems.

A problem adds two ``n``-digit numbers (``n`` is the problem's size). Its prompt is
``"4785+0912="``; its reference response works from the least significant digit up, one step
per digit, ``<a digit>+<b digit>+<carry in>=<two-digit sum>;``, then ``=`` and the sum::

    5+2+0=07;8+1+0=09;7+9+0=16;4+0+1=05;=5697

(``<eos>`` follows). Each step is 9 tokens with the character-level tokenizer, so the response
of a size-``n`` problem is ``9n + 1 + len(sum)`` tokens plus EOS: 12 or 13 tokens at ``n = 1``,
~243 at ``n = 24``. Sizes are drawn so that most problems are short and a tail is long
(:class:`~examples.tiny_task.long_cot.params.LongCotDataParams`), which gives response lengths
a median of ~32 tokens and a 99th percentile of ~240. Operands keep their leading zeros, so
every step of a size-``n`` problem has a digit of each.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from examples.tiny_task.long_cot.params import LongCotDataParams

DATA_SOURCE = "long_cot"


@dataclass(frozen=True)
class LongCotProblem:
    """One addition of two equally long digit strings."""

    index: int
    a: str
    b: str

    @property
    def size(self) -> int:
        return len(self.a)

    @property
    def prompt(self) -> str:
        return f"{self.a}+{self.b}="

    @property
    def ground_truth(self) -> str:
        """The sum as plain decimal text (no leading zeros)."""
        return str(int(self.a) + int(self.b))

    @property
    def answer(self) -> str:
        """The reference response: the scratchpad, then ``=`` and the sum."""
        return scratchpad(self.a, self.b) + "=" + self.ground_truth


def scratchpad(a: str, b: str) -> str:
    """The digit-by-digit steps of ``a + b``, least significant first."""
    steps, carry = [], 0
    for x, y in zip(reversed(a), reversed(b), strict=True):
        total = int(x) + int(y) + carry
        steps.append(f"{x}+{y}+{carry}={total:02d};")
        carry = total // 10
    return "".join(steps)


def draw_size(rng: random.Random, params: LongCotDataParams) -> int:
    """One problem size: short with probability ``short_share``, else from the tail."""
    if rng.random() < params.short_share:
        return rng.randint(1, params.short_max)
    return rng.randint(params.short_max + 1, params.max_digits)


def draw_problem(rng: random.Random, size: int, index: int) -> LongCotProblem:
    """A random size-``size`` problem (operands may start with zeros)."""
    a = "".join(rng.choice("0123456789") for _ in range(size))
    b = "".join(rng.choice("0123456789") for _ in range(size))
    return LongCotProblem(index, a, b)


def split_problems(params: LongCotDataParams, split: str) -> list[LongCotProblem]:
    """The ``train`` or ``test`` split: seeded by ``params.seed`` and the split's name."""
    count = params.train_problems if split == "train" else params.test_problems
    rng = random.Random(f"{params.seed}:{split}")
    return [draw_problem(rng, draw_size(rng, params), i) for i in range(count)]


def corpus_lines() -> list[str]:
    """The text the tokenizer is trained on: every character a problem or response can hold."""
    return ["0123456789+=;", "5+2+0=07;=7"]
