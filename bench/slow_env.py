"""A heavy environment for bench/async_vs_sync.py: the arithmetic reward behind a latency of
50-200 ms per prompt group (like a sandbox or a remote verifier), spent per row so that it
overlaps whatever else runs."""

from __future__ import annotations

import time

from operators.rewards.arithmetic import compute_score as arithmetic

GROUP = 8  # samples per prompt in the bench


def group_latency_s(index: int) -> float:
    """A fixed latency per problem: 50-200 ms, spread over the dataset."""
    return 0.05 + 0.15 * ((index * 37) % 100) / 99


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info=None):
    """The arithmetic reward after this row's share of its group's latency."""
    time.sleep(group_latency_s(int((extra_info or {}).get("index", 0))) / GROUP)
    return arithmetic(data_source, solution_str, ground_truth, extra_info)
