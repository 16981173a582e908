"""Host uids for sandbox slots, each held by one slot on the whole host.

A slot drops to its own non-root host uid before bwrap starts, and its process limit
(RLIMIT_NPROC) counts every process of that uid on the host, so two slots must never share
one, even in different processes (two sandbox pools on one node, two test workers). A slot
holds its uid with an exclusive `flock` on `<LOCK_DIR>/<uid>.lock`, which the kernel drops
when the holder exits, however it exits.
"""

from __future__ import annotations

import fcntl
import os
import stat
import threading
from pathlib import Path

UID_BASE = 61000
UID_COUNT = 4096  # slot uids are UID_BASE .. UID_BASE + UID_COUNT - 1
LOCK_DIR = Path("/run/rldag-sandbox-uids")

_lock = threading.Lock()
_held: dict[int, int] = {}  # uid -> the fd of its flocked file (this process's slots)


class UidsExhausted(RuntimeError):
    """Every slot uid is held by a live slot on this host."""


def _lock_dir() -> Path:
    """The lock directory: root's alone (a link or another owner's directory is refused)."""
    try:
        os.mkdir(LOCK_DIR, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(LOCK_DIR)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
        raise PermissionError(f"{LOCK_DIR}: expected a directory only root can write")
    return LOCK_DIR


def allocate_uid() -> int | None:
    """A slot uid no other live slot on this host holds; None when we are not root (slots
    then run as our own non-root uid)."""
    if os.geteuid() != 0:
        return None
    with _lock:
        root = _lock_dir()
        start = os.getpid() % 64 * 64  # processes start apart, so they rarely contend
        for k in range(UID_COUNT):
            uid = UID_BASE + (start + k) % UID_COUNT
            if uid in _held:
                continue
            fd = os.open(root / f"{uid}.lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            _held[uid] = fd
            return uid
    raise UidsExhausted(f"all {UID_COUNT} sandbox uids from {UID_BASE} are held by live slots")


def release_uid(uid: int | None) -> None:
    """Give a slot's uid back."""
    with _lock:
        fd = _held.pop(uid, None)
    if fd is not None:
        os.close(fd)  # closing the only descriptor drops the flock
