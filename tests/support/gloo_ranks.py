"""FSDP2 on CPU in tests: N processes forming one gloo training group, with the rendezvous
environment the training pool's workers get (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so
the trainer joins the group itself. The ranks fork from a forkserver that imported torch,
transformers and the operators once for the session (a fresh interpreter per rank spent
~7 CPU-seconds importing them), never from the test process itself (its threads and
OpenMP state do not survive a fork)."""

from __future__ import annotations

import multiprocessing
import os
import socket
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

PRELOAD = [  # what the rank targets' modules import (operators load lazily)
    "torch",
    "torch.distributed.fsdp",
    "transformers",
    "operators.generate.single_turn",
    "operators.train.critic",
    "operators.train.policy_gradient",
]


def forkserver() -> multiprocessing.context.BaseContext:
    """The multiprocessing context whose processes fork from the preloaded forkserver."""
    multiprocessing.set_forkserver_preload(PRELOAD)  # read when the server first starts
    return multiprocessing.get_context("forkserver")


def run_ranks(target: Callable[..., None], *args: object, nprocs: int = 2) -> None:
    """Run ``target(rank, *args)`` in `nprocs` fresh processes (`target` and `args` must
    pickle: a module-level function); a rank's failure fails the call."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    forkserver()
    args = (nprocs, port, target, args)
    mp.start_processes(_rank, args=args, nprocs=nprocs, start_method="forkserver")


def _rank(rank: int, nprocs: int, port: int, target: Callable[..., None], args: tuple) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(nprocs), MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    target(rank, *args)
    if dist.is_initialized():
        dist.barrier()  # no rank tears gloo down while another still talks
        dist.destroy_process_group()
