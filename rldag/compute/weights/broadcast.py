"""The weights edge as a collective: a torch.distributed group of its own spanning the
trainer's rank 0 and the rollout workers, over which rank 0 broadcasts the full policy in
buckets of one dtype (gloo on CPU, NCCL on GPU).

The group is a backend built on its own TCPStore, never registered with torch.distributed,
so it lives beside the trainer's FSDP group (the default group on training workers) without
touching it and needs nothing from the trainer's other ranks. The first sync broadcasts
the bucket plan (names, shapes, dtypes; later ones an 8-byte header while it holds), then
the buckets as bytes (any dtype: bf16 and float8 too). A gloo group whose members share a
host moves the buckets through one shared-memory file instead of its sockets
(rldag.compute.weights.shared_buckets); the group still carries the plan and orders the syncs: each
receiver acknowledges a sync once it has copied the weights out, and rank 0 waits for
those acknowledgements before it writes the next one.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from rldag.compute.weights.buckets import Bucket, flatten_into, plan_buckets, unflatten
from rldag.compute.weights.shared_buckets import SharedBuckets, has_room, probe_path

if TYPE_CHECKING:
    import torch

STORE_PREFIX = "rldag-weights"
ACK_TAG = 1  # a receiver is done with the shared buckets of the last sync


class WeightGroup:
    """This process's membership of a weight group: rank 0 sends, the others receive.

    Buffers and the plan are kept between syncs (a model's plan does not change), so a
    sync after the first allocates nothing and sends no plan.
    """

    def __init__(self, backend: object, store: object, rank: int, size: int, device: str) -> None:
        self.backend, self.store = backend, store  # the backend reads the store all along
        self.rank, self.size, self.device = rank, size, device
        self.shared_memory = False  # buckets through a shared-memory file (one host, gloo)
        self._plan: tuple[Bucket, ...] = ()
        self._buffers: list[torch.Tensor] = []
        self._shared: SharedBuckets | None = None
        self._acks_due = False  # rank 0, shared memory: receivers still to say they are done
        self._ack: tuple | None = None  # a receiver's last acknowledgement (token, its Work)

    @staticmethod
    def open_store(host: str, timeout_s: float) -> tuple[object, int]:
        """Rank 0: listen on a free port (bound here, so no other process can take it)."""
        import torch.distributed as dist

        timeout = timedelta(seconds=timeout_s)
        store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False, timeout=timeout)
        return store, store.port

    @classmethod
    def join(
        cls,
        host: str,
        port: int,
        rank: int,
        size: int,
        backend: str,
        timeout_s: float,
        store: object | None = None,
        shared_memory: bool = True,
    ) -> WeightGroup:
        """Join the group at `host:port` (rank 0 passes the store it opened); every member
        calls this at the same time. `backend` is "gloo" or "nccl"; a gloo group uses shared
        memory when `shared_memory` and every member can see rank 0's files."""
        import torch.distributed as dist

        timeout = timedelta(seconds=timeout_s)
        if store is None:
            store = dist.TCPStore(host, port, is_master=False, timeout=timeout)
        prefixed = dist.PrefixStore(STORE_PREFIX, store)
        if backend == "nccl":
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            group, device = dist.ProcessGroupNCCL(prefixed, rank, size, options), "cuda"
        else:
            group, device = dist.ProcessGroupGloo(prefixed, rank, size, timeout), "cpu"
        made = cls(group, store, rank, size, device)
        made.shared_memory = made._all_see_probe(shared_memory and backend == "gloo")
        return made

    def _all_see_probe(self, wanted: bool) -> bool:
        """Whether every member sees a file rank 0 made in the shared-memory directory (two
        collectives: they also connect the group now rather than on the first sync)."""
        import torch
        import torch.distributed as dist

        probe = probe_path() if wanted and self.rank == 0 else ""
        path = self._broadcast_object(probe)
        seen = torch.tensor(
            [int(bool(path) and os.path.exists(path))], dtype=torch.int32, device=self.device
        )
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.MIN
        self.backend.allreduce([seen], opts).wait()
        if probe:
            os.unlink(probe)
        return bool(seen.item())

    def _broadcast(self, tensor: torch.Tensor) -> None:
        """Broadcast `tensor`'s bytes from rank 0, in place."""
        import torch
        import torch.distributed as dist

        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        flat = tensor.reshape(-1)
        if flat.dtype != torch.uint8:
            flat = flat.view(torch.uint8)
        self.backend.broadcast([flat], opts).wait()

    def _broadcast_object(self, value: object) -> object:
        """Rank 0's picklable `value` on every member: its size, then (unless `value` is
        None, sent as size 0 in one broadcast) its bytes."""
        import torch

        payload = pickle.dumps(value) if self.rank == 0 and value is not None else b""
        size = torch.tensor([len(payload)], dtype=torch.int64, device=self.device)
        self._broadcast(size)
        if not size.item():
            return None
        data = torch.empty(int(size.item()), dtype=torch.uint8, device=self.device)
        if self.rank == 0:
            data.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
        self._broadcast(data)
        return pickle.loads(data.cpu().numpy().tobytes())

    def _barrier(self) -> None:
        self.backend.barrier().wait()

    def _use_plan(self, plan: tuple[Bucket, ...], path: str | None) -> None:
        """Buffers for a new plan. Rank 0 (`path` None) puts them in a new shared file when
        the group shares memory and the directory has room for them; the others map the
        file at `path`, or hold their own buffers when it is ""."""
        import torch

        self._plan, self._shared = plan, None
        if path is None and self.shared_memory and has_room(plan):
            self._shared = SharedBuckets.create(plan)
        elif path:
            self._shared = SharedBuckets(path, plan)
        if self._shared is not None:
            self._buffers = self._shared.buffers
        else:
            self._buffers = [
                torch.empty(b.numel, dtype=getattr(torch, b.dtype), device=self.device)
                for b in plan
            ]

    def send(self, weights: Mapping[str, torch.Tensor], bucket_bytes: int) -> tuple[Bucket, ...]:
        """Rank 0: broadcast `weights` (full tensors) to every other member."""
        if self.rank != 0:
            raise RuntimeError("rank 0 of a weight group sends; the others receive")
        if self._acks_due:  # no writing into the shared buckets before everyone read them
            self._acks(receive=True)
            self._acks_due = False
        plan = plan_buckets(weights, bucket_bytes)
        new = plan != self._plan
        if new:
            self._use_plan(plan, None)
        shared = self._shared
        if shared is not None:
            for bucket, buffer in zip(plan, self._buffers, strict=True):
                flatten_into(bucket, weights, buffer)
        header = (plan, shared.path if shared is not None else "") if new else None
        self._broadcast_object(header)  # steady state: 8 bytes
        if shared is None:
            for bucket, buffer in zip(plan, self._buffers, strict=True):
                flatten_into(bucket, weights, buffer)
                self._broadcast(buffer)
            return plan
        if new:
            self._barrier()  # every receiver has mapped the file: its name can go
            shared.unlink()
        self._acks_due = True
        return plan

    def _acks(self, receive: bool) -> None:
        """Rank 0 takes every receiver's acknowledgement; a receiver sends its own without
        waiting (gloo completes a send once rank 0 takes it, at its next sync)."""
        import torch

        token = torch.zeros(1, dtype=torch.uint8)
        if receive:
            for rank in range(1, self.size):
                self.backend.recv([token], rank, ACK_TAG).wait()
        else:
            self._ack = (token, self.backend.send([token], 0, ACK_TAG))

    def receive(self, consume: Callable[[dict[str, torch.Tensor]], None]) -> None:
        """Other ranks: call `consume` with the broadcast weights by name, as views of this
        member's buffers that are valid only during the call (copy them, e.g. into a
        model: `load_weights`)."""
        if self.rank == 0:
            raise RuntimeError("rank 0 of a weight group sends; the others receive")
        if self._ack is not None:
            self._ack[1].wait()  # taken by rank 0 as this sync began
            self._ack = None
        update = self._broadcast_object(None)
        if update is not None:
            self._use_plan(*update)
            if self._shared is not None:
                self._barrier()  # mapped: rank 0 may unlink the file
        out: dict[str, torch.Tensor] = {}
        for bucket, buffer in zip(self._plan, self._buffers, strict=True):
            if self._shared is None:
                self._broadcast(buffer)
            out.update(unflatten(bucket, buffer))
        consume(out)
        if self._shared is not None:
            self._acks(receive=False)  # rank 0 may write the shared buckets again

    def close(self) -> None:
        """Leave the group (the other members close theirs too)."""
        if self._shared is not None and self.rank == 0:
            self._shared.unlink()
        self._shared = None
        self.backend.shutdown()
