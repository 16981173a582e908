"""Random GRPO training tables for the trainer's tests."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tests.support.tiny_models import VOCAB


def grpo_table(
    groups: int = 5,
    seed: int = 0,
    prompt_len: tuple[int, int] = (1, 6),
    response_len: tuple[int, int] = (0, 5),
    long_row: int | None = None,
) -> pa.Table:
    """Groups of 1-4 samples sharing a prompt of 1-6 tokens; responses of 0-5 tokens (or the
    given length ranges); row `long_row`, if given, answers with 30 tokens."""
    rng = np.random.default_rng(seed)
    prompts, responses = [], []
    for _ in range(groups):
        prompt = rng.integers(3, VOCAB, size=int(rng.integers(*prompt_len, endpoint=True)))
        for _ in range(int(rng.integers(1, 5))):
            prompts.append(prompt.tolist())
            size = int(rng.integers(*response_len, endpoint=True))
            responses.append(rng.integers(3, VOCAB, size=size).tolist())
    responses[0] = responses[0] or [5]  # at least one token to learn from
    if long_row is not None:
        responses[long_row] = rng.integers(3, VOCAB, size=30).tolist()
    return pa.table(
        {
            "prompt_ids": pa.array(prompts, pa.list_(pa.int32())),
            "response_ids": pa.array(responses, pa.list_(pa.int32())),
            "response_logprobs": [(-rng.uniform(1, 4, len(r))).tolist() for r in responses],
            "advantage": pa.array(rng.normal(size=len(prompts)), pa.float32()),
        }
    )
