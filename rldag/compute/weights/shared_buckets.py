"""Bucket buffers in one shared-memory file that every member of a weight group on one
host maps: the sender flattens into it and the receivers copy out of it, so the weights
cross processes with two memory copies and no socket. The file is unlinked once every
member has mapped it (the mappings stay), so a killed run leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import TYPE_CHECKING

from rldag.compute.weights.buckets import Bucket

if TYPE_CHECKING:
    import torch

ALIGN = 64  # bytes; each bucket starts aligned so it can be viewed as its dtype
SHARED_DIR_ENV = "RLDAG_SHARED_DIR"  # where the files go: /dev/shm unless this names another


def shared_dir() -> str:
    """The shared-memory directory weight files go to (`$RLDAG_SHARED_DIR`, else /dev/shm)."""
    return os.environ.get(SHARED_DIR_ENV) or "/dev/shm"


def _layout(plan: tuple[Bucket, ...]) -> tuple[list[int], int]:
    offsets, end = [], 0
    for bucket in plan:
        offsets.append(end)
        end += -(-bucket.nbytes // ALIGN) * ALIGN
    return offsets, max(end, ALIGN)


class SharedBuckets:
    """One mapped file holding every bucket of a plan, each viewed as its dtype."""

    def __init__(self, path: str, plan: tuple[Bucket, ...]) -> None:
        import torch

        offsets, size = _layout(plan)
        self.path, self.plan = path, plan
        raw = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
        self.buffers: list[torch.Tensor] = [
            raw[o : o + b.nbytes].view(getattr(torch, b.dtype))
            for o, b in zip(offsets, plan, strict=True)
        ]

    @classmethod
    def create(cls, plan: tuple[Bucket, ...], directory: str | None = None) -> SharedBuckets:
        """The sender: a new file sized for `plan`."""
        path = os.path.join(directory or shared_dir(), f"rldag-weights-{uuid.uuid4().hex}")
        return cls(path, plan)

    def unlink(self) -> None:
        """Remove the file's name (members that mapped it keep their mapping)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def has_room(plan: tuple[Bucket, ...], directory: str | None = None) -> bool:
    """Whether `directory` has the space for `plan`'s file (writing past a full tmpfs, e.g.
    a container's 64 MB /dev/shm, would kill the process)."""
    stat = os.statvfs(directory or shared_dir())
    return stat.f_bavail * stat.f_frsize >= _layout(plan)[1]


def probe_path(directory: str | None = None) -> str:
    """A new empty file in `directory` whose presence tells members they share it (same
    host), or "" where there is no such directory."""
    path = os.path.join(directory or shared_dir(), f"rldag-weights-probe-{uuid.uuid4().hex}")
    try:
        with open(path, "x"):
            pass
    except OSError:
        return ""
    return path
