"""The long-CoT task's rule-based reward, with veRL's ``compute_score`` signature.

A response earns 1.0 when it is well formed, one or more steps ``d+d+d=dd;`` then ``=`` and an
integer (end-of-sequence marker text and whitespace may follow), and that integer's text
equals the ground truth exactly; anything else earns 0.0. The steps themselves are not checked:
the final answer is what is verified, as in math RLVR. There is no partial credit for the
format: the warm-up teaches it on the short problems, where a format bonus would be nearly the
same for every sample of a GRPO group and cancel in the advantage; on the long ones it would pay
for a well-formed wrong scratchpad. (Not measured against a variant with format credit.)
"""

from __future__ import annotations

from typing import Any

from operators.score.rewards.arithmetic import answer_then_end, exact_score, matched_answer

_RESPONSE = answer_then_end(r"(?:[0-9]\+[0-9]\+[0-9]=[0-9]{2};)+=([0-9]+)")


def extract_answer(solution_str: str) -> str | None:
    """The final answer of a well-formed response as text, or None when it is malformed."""
    return matched_answer(_RESPONSE, solution_str)


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
) -> float:
    """1.0 when the well-formed response's final answer equals ``ground_truth``, else 0.0.

    ``data_source`` and ``extra_info`` are accepted for veRL compatibility and not used.
    """
    return exact_score(extract_answer(solution_str), ground_truth)
