"""The trainer's process group takes its timeout from `faults.node_timeout_s` (the pool
workers export it), not torch's default of 30 minutes for gloo: a rank that never joins a
collective fails it within the run's deadline."""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from operators.train.distributed import init_process_group
from rldag.config.faults import COLLECTIVE_TIMEOUT
from tests.support.gloo_ranks import run_ranks


def _joins_with_the_timeout(rank: int) -> None:
    os.environ[COLLECTIVE_TIMEOUT] = "7"  # what PoolWorker.set_master exports
    assert init_process_group("cpu")
    gloo = dist.group.WORLD._get_backend(torch.device("cpu"))
    assert gloo.options._timeout == timedelta(seconds=7)


def test_the_trainers_process_group_times_out_at_the_node_deadline():
    run_ranks(_joins_with_the_timeout)
