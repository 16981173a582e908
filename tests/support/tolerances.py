"""Tolerances derived from the computation, for tests that compare floats computed two ways
(an engine's incremental decode vs a teacher-forced forward, a merged LoRA vs base + adapter,
a batch vs one row at a time).

Two fp32 evaluations of the same function differ only by rounding: each is within its own
rounding error of the exact result, so they are within the sum of the two. A constant tuned
until one CPU passes does not say how large that is; the processor's kernels (AVX-512, AVX2,
scalar; MKL's code paths) change the order of every reduction, so the rounding error moves
with the machine. Here it is measured on the machine itself: the same function evaluated in
float64 is exact to ~1e-16 at these sizes, so `|f32 - f64|` is the fp32 path's actual
rounding error on these inputs. The other path rounds in another order, but through the same
operations on the same magnitudes, so its error is of the same size; allowing
`ROUNDING_FACTOR` times the measured one covers both paths with room for the other path's
different blocking. A real defect (a missing merge, a wrong cache position, a wrong
temperature) moves results by orders of magnitude more: tests assert that too where it
could be small.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch

ROUNDING_FACTOR = 8.0  # both paths' rounding (2x), other blockings of the sums (up to 4x)
FLOOR = 1e-7  # a result with no rounding at all (|f32 - f64| = 0) still gets fp32's spacing


def rounding_atol(
    model: torch.nn.Module, evaluate: Callable[[torch.nn.Module], torch.Tensor]
) -> float:
    """An absolute tolerance for fp32 results of ``evaluate(model)``: ROUNDING_FACTOR times
    the largest difference between them and the same evaluation of a float64 copy."""
    with torch.no_grad():
        single = evaluate(model).double()
        double = evaluate(copy.deepcopy(model).double())
    return max(ROUNDING_FACTOR * float((single - double).abs().max()), FLOOR)


def teacher_forced_logprobs(
    model: torch.nn.Module, prompt: list[int], tokens: list[int], temperature: float = 1.0
) -> torch.Tensor:
    """log_softmax(logits / T) of ``tokens`` given ``prompt``, from one unpadded forward pass
    (in the model's dtype: float64 for a float64 copy, float32 otherwise)."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1]
    if logits.dtype != torch.float64:
        logits = logits.float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(tokens).unsqueeze(-1)).squeeze(-1)


def logprob_atol(
    model: torch.nn.Module, prompt: list[int], tokens: list[int], temperature: float = 1.0
) -> float:
    """The tolerance for log-probs of ``tokens`` after ``prompt`` computed two ways (an
    engine's decode, batched or alone): their teacher-forced fp32 rounding, measured."""
    return rounding_atol(model, lambda m: teacher_forced_logprobs(m, prompt, tokens, temperature))
