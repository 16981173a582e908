"""Rule-based reward for the arithmetic task, with veRL's ``compute_score`` signature.

A response earns 1.0 only when, after stripping surrounding whitespace, it is an integer
optionally followed by end-of-sequence marker text (``<eos>``, ``<pad>``, ``</s>``,
``<|endoftext|>``, ``<|im_end|>``) and whitespace, and that integer's text equals the
ground truth exactly (so ``"08"`` does not match ``"8"``). Anything else earns 0.0.
"""

from __future__ import annotations

import re
from typing import Any

END_MARKERS = ("<eos>", "<pad>", "</s>", "<|endoftext|>", "<|im_end|>")

_END = "|".join(re.escape(marker) for marker in END_MARKERS)


def answer_then_end(answer: str) -> re.Pattern[str]:
    """A whole response: `answer` (a regex whose first group is the answer), then optional
    end-of-sequence marker text and whitespace."""
    return re.compile(rf"{answer}(?:\s*(?:{_END}))*")


def matched_answer(response: re.Pattern[str], solution_str: str) -> str | None:
    """The answer group of `solution_str` (stripped) when all of it matches `response`."""
    match = response.fullmatch(solution_str.strip())
    return match.group(1) if match else None


def exact_score(answer: str | None, ground_truth: str) -> float:
    """1.0 when `answer`'s text equals ``ground_truth`` exactly, else 0.0 (also for None)."""
    return 1.0 if answer is not None and answer == str(ground_truth).strip() else 0.0


_RESPONSE = answer_then_end(r"(-?[0-9]+)")


def extract_answer(solution_str: str) -> str | None:
    """The response's integer answer as text, or None when the response is malformed."""
    return matched_answer(_RESPONSE, solution_str)


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
) -> float:
    """1.0 when the response's answer equals ``ground_truth`` exactly, else 0.0.

    ``data_source`` and ``extra_info`` are accepted for veRL compatibility and not used.
    """
    return exact_score(extract_answer(solution_str), ground_truth)
