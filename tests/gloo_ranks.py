"""FSDP2 on CPU in tests: N spawned processes forming one gloo training group, with the
rendezvous environment the training pool's workers get (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), so the trainer joins the group itself."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run_ranks(target: Callable[..., None], *args: object, nprocs: int = 2) -> None:
    """Run ``target(rank, *args)`` in `nprocs` spawned processes (`target` and `args` must
    pickle: a module-level function); a rank's failure fails the call."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.spawn(_rank, args=(nprocs, port, target, args), nprocs=nprocs)


def _rank(rank: int, nprocs: int, port: int, target: Callable[..., None], args: tuple) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(nprocs), MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    target(rank, *args)
    if dist.is_initialized():
        dist.barrier()  # no rank tears gloo down while another still talks
        dist.destroy_process_group()
