"""The code task: twenty tiny function-writing problems with reference solutions and tests.

A problem's prompt asks for one Python function (``"Write a Python function add(a, b) that
returns a + b.\\n"``); its reference solution is a fenced ``python`` block defining it, and its
tests are two or three top-level ``assert`` statements, the shape :mod:`operators.sandbox` reads
from the ``ground_truth`` column. Problems are indexed in definition order.
"""

from __future__ import annotations

from dataclasses import dataclass

DATA_SOURCE = "code"
PROMPT_FORMAT = "Write a Python function {signature} that returns {returns}.\n"
FENCE = "```"


@dataclass(frozen=True)
class CodeProblem:
    """One function-writing problem: signature, what it returns, its body and its tests."""

    index: int
    signature: str  # e.g. "add(a, b)"
    returns: str  # the prompt's description of the result, e.g. "a + b"
    body: str  # the returned expression of the reference solution
    tests: tuple[str, ...]  # assert statements

    @property
    def name(self) -> str:
        return self.signature.split("(", 1)[0]

    @property
    def prompt(self) -> str:
        return PROMPT_FORMAT.format(signature=self.signature, returns=self.returns)

    @property
    def program(self) -> str:
        """The reference program (what the sandbox runs)."""
        return f"def {self.signature}:\n    return {self.body}\n"

    @property
    def answer(self) -> str:
        """The reference response: the program in a fenced ``python`` block."""
        return f"{FENCE}python\n{self.program}{FENCE}"

    @property
    def ground_truth(self) -> str:
        """The tests as assert source, one statement per line."""
        return "".join(f"{test}\n" for test in self.tests)


_SPECS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("add(a, b)", "a + b", "a + b", ("add(1, 2) == 3", "add(-1, 1) == 0", "add(0, 0) == 0")),
    ("sub(a, b)", "a - b", "a - b", ("sub(5, 3) == 2", "sub(0, 4) == -4")),
    ("mul(a, b)", "a * b", "a * b", ("mul(2, 3) == 6", "mul(-1, 7) == -7", "mul(0, 9) == 0")),
    ("square(x)", "x squared", "x * x", ("square(3) == 9", "square(-2) == 4")),
    ("double(x)", "twice x", "2 * x", ("double(4) == 8", "double(0) == 0", "double(-3) == -6")),
    ("negate(x)", "minus x", "-x", ("negate(5) == -5", "negate(-2) == 2")),
    ("is_even(n)", "True if n is even", "n % 2 == 0", ("is_even(4)", "not is_even(7)")),
    ("max2(a, b)", "the larger of a and b", "max(a, b)", ("max2(1, 2) == 2", "max2(5, 3) == 5")),
    ("min2(a, b)", "the smaller of a and b", "min(a, b)", ("min2(1, 2) == 1", "min2(5, 3) == 3")),
    ("absolute(x)", "the absolute value of x", "abs(x)", ("absolute(-3) == 3", "absolute(2) == 2")),
    ("first(xs)", "the first item of xs", "xs[0]", ("first([4, 5]) == 4", "first('ab') == 'a'")),
    ("last(xs)", "the last item of xs", "xs[-1]", ("last([4, 5]) == 5", "last('ab') == 'b'")),
    ("length(xs)", "the length of xs", "len(xs)", ("length([1, 2, 3]) == 3", "length('') == 0")),
    ("total(xs)", "the sum of xs", "sum(xs)", ("total([1, 2, 3]) == 6", "total([]) == 0")),
    ("reverse(s)", "s reversed", "s[::-1]", ("reverse('abc') == 'cba'", "reverse('') == ''")),
    ("shout(s)", "s in upper case", "s.upper()", ("shout('hi') == 'HI'", "shout('a1') == 'A1'")),
    ("is_positive(x)", "True if x > 0", "x > 0", ("is_positive(3)", "not is_positive(-1)")),
    ("remainder(a, b)", "a mod b", "a % b", ("remainder(7, 3) == 1", "remainder(9, 3) == 0")),
    ("power(a, b)", "a to the power b", "a ** b", ("power(2, 3) == 8", "power(5, 0) == 1")),
    ("increment(x)", "x plus one", "x + 1", ("increment(1) == 2", "increment(-1) == 0")),
)


def all_code_problems() -> list[CodeProblem]:
    """The twenty problems in index order."""
    return [
        CodeProblem(i, signature, returns, body, tuple(f"assert {t}" for t in tests))
        for i, (signature, returns, body, tests) in enumerate(_SPECS)
    ]


def corpus_lines() -> list[str]:
    """The text the tokenizer is trained on: every prompt, reference response and test."""
    return [p.prompt + p.answer + "\n" + p.ground_truth for p in all_code_problems()]
