"""One run per run directory: a lease in storage, `<run>/lock/<epoch>.json`, held by the
process that runs the run. It works the same on local disk and on S3.

The rule: the holder is the highest epoch. A process takes a run by creating the next epoch
exclusively (`Storage.create_bytes`: a hard link on disk, a conditional PUT on S3), so when
two processes race for one epoch exactly one wins; nothing is ever deleted or overwritten by
another process. The holder rewrites its own epoch every `lease_s / 4` seconds (heartbeat)
and marks it released when the run ends. A newer process may take the run when the highest
epoch is released, or stale: its heartbeat is older than `storage.lock_lease_s`, or it was
written on this host by a pid that no longer exists (a SIGKILLed driver frees its run at once
on the same host; from another host after the lease), or by this process when none of its
locks holds it any more (a run that failed and is resumed in the same process). Otherwise it
is refused (exit 2). A holder that finds a newer epoch than its own has lost the run and stops
(`check`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from rldag.config.errors import InputError, RunError
from rldag.storage.store import Storage

LOCK_DIR = "lock"
_HELD: set[tuple[str, str, int]] = set()  # (storage root, run id, epoch) held in this process
log = logging.getLogger("rldag.run_lock")
CLAIM_ATTEMPTS = 8  # fresh ids tried before giving up (each collides with p < 2e-7)


@dataclass(frozen=True)
class LockOwner:
    """What an epoch file says about the process that holds (or held) the run."""

    host: str
    pid: int
    started: float  # unix time the epoch was taken
    heartbeat: float  # unix time of the last heartbeat
    released: bool = False

    def stale(self, lease_s: float, now: float, held: bool = False) -> bool:
        """Whether another holder may take the run from this owner (`held`: a RunLock of this
        process holds the epoch now)."""
        if self.released or now - self.heartbeat > lease_s:
            return True
        if self.host != socket.gethostname():
            return False
        if self.pid == os.getpid():  # this process: stale unless one of its locks holds it
            return not held
        return not _pid_alive(self.pid)

    def describe(self) -> str:
        age = time.time() - self.heartbeat
        return f"pid {self.pid} on {self.host} (last heartbeat {age:.0f} s ago)"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by someone else
        return True
    return True


def _epoch_name(epoch: int) -> str:
    return f"{epoch:08d}.json"


class RunLock:
    """The lease of one run, held by this process from `acquire` until `release`."""

    def __init__(self, storage: Storage, run_id: str, lease_s: float) -> None:
        self.storage, self.run_id, self.lease_s = storage, run_id, lease_s
        self.epoch = 0
        self._owner: LockOwner | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lost: str | None = None

    def _rel(self, epoch: int) -> str:
        return f"{self.run_id}/{LOCK_DIR}/{_epoch_name(epoch)}"

    def _stale(self, epoch: int, owner: LockOwner) -> bool:
        held = (self.storage.root, self.run_id, epoch) in _HELD
        return owner.stale(self.lease_s, time.time(), held)

    def current(self) -> tuple[int, LockOwner | None]:
        """The highest epoch and its owner (0, None when nobody ever held the run)."""
        names = [n for n in self.storage.list(f"{self.run_id}/{LOCK_DIR}") if n.endswith(".json")]
        if not names:
            return 0, None
        epoch = max(int(n.removesuffix(".json")) for n in names)
        return epoch, LockOwner(**json.loads(self.storage.read_text(self._rel(epoch))))

    def refusal(self) -> str | None:
        """Why this process may not take the run now, or None when it may."""
        epoch, owner = self.current()
        if owner is None or self._stale(epoch, owner):
            return None
        return f"run {self.run_id} is running: held by {owner.describe()}"

    def acquire(self, new: bool = False) -> bool:
        """Take the run and start the heartbeat. With `new`, only as its first holder
        (False: the run id is taken). Otherwise an InputError when a live process holds it."""
        epoch, owner = (0, None) if new else self.current()
        if owner is not None and not self._stale(epoch, owner):
            message = f"run {self.run_id} is running: held by {owner.describe()}"
            raise InputError(f"{message}; a second run of it is refused", path="--resume")
        now = time.time()
        mine = LockOwner(socket.gethostname(), os.getpid(), now, now)
        if not self.storage.create_bytes(self._rel(epoch + 1), _dump(mine)):
            if new:
                return False
            message = f"run {self.run_id} was just taken by another process"
            raise InputError(message, path="--resume")
        self.epoch, self._owner = epoch + 1, mine
        _HELD.add((self.storage.root, self.run_id, self.epoch))
        self._thread = threading.Thread(target=self._beat, name="rldag-run-lock", daemon=True)
        self._thread.start()
        return True

    def _beat(self) -> None:
        while not self._stop.wait(self.lease_s / 4):
            try:
                self.heartbeat()
            except Exception:  # storage unreachable for a moment: the next beat retries
                continue

    def heartbeat(self) -> None:
        """Renew the lease, unless a newer epoch shows the run was taken over."""
        epoch, _ = self.current()
        if epoch != self.epoch:
            self._lost = f"run {self.run_id} was taken over by lock epoch {epoch}"
            self._stop.set()
            return
        assert self._owner is not None
        self._owner = LockOwner(**{**asdict(self._owner), "heartbeat": time.time()})
        self.storage.write_bytes(self._rel(self.epoch), _dump(self._owner))

    def check(self) -> None:
        """Raise a RunError when this process no longer holds the run."""
        if self._lost:
            raise RunError(self._lost)

    def release(self) -> None:
        """Stop the heartbeat and mark the epoch released (a later --resume may take it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        _HELD.discard((self.storage.root, self.run_id, self.epoch))
        if self._owner is None or self._lost:
            return
        released, self._owner = LockOwner(**{**asdict(self._owner), "released": True}), None
        try:
            self.storage.write_bytes(self._rel(self.epoch), _dump(released))
        except Exception as err:  # storage full or gone: the dead pid or the lease frees it
            log.warning("could not mark the lock of run %s released: %s", self.run_id, err)


def _dump(owner: LockOwner) -> bytes:
    return json.dumps(asdict(owner)).encode()


def claim_new_run(storage: Storage, make_id: Callable[[], str], lease_s: float) -> RunLock:
    """Create a new run's directory and hold its lock; an id that is already taken (by
    chance, or by a run started at the same moment) is never reused: another is made."""
    for _ in range(CLAIM_ATTEMPTS):
        lock = RunLock(storage, make_id(), lease_s)
        if storage.create_run_dir(lock.run_id) and lock.acquire(new=True):
            return lock
    raise RunError(f"could not create a new run directory under {storage.root}")
