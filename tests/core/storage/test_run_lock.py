"""One run per run directory, on local disk and on a real local S3-protocol server: run ids
do not collide, creating a run directory is exclusive, and a run held by a live process is
refused to a second one while a stale hold (released, dead pid on this host, no heartbeat
for the lease) is taken over."""

from __future__ import annotations

import json
import multiprocessing
import os
import secrets
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import count

import pytest
from s3fs import S3FileSystem

from rldag.config.errors import InputError, RunError
from rldag.config.spec import StorageSpec
from rldag.storage.run_lock import LockOwner, RunLock, claim_new_run
from rldag.storage.store import Storage, new_run_id, open_storage
from tests.support.s3 import endpoint  # noqa: F401  (the S3 server fixture)


@pytest.fixture(params=["disk", "s3"])
def store(request, tmp_path) -> Storage:
    if request.param == "disk":
        return Storage(str(tmp_path / "runs"))
    url = request.getfixturevalue("endpoint")
    name = f"lock-{secrets.token_hex(4)}"
    S3FileSystem(endpoint_url=url, skip_instance_cache=True).mkdir(name)
    return open_storage(StorageSpec(uri=f"s3://{name}/runs", endpoint_url=url))


def _write_owner(store: Storage, run_id: str, epoch: int, owner: LockOwner) -> None:
    store.write_text(f"{run_id}/lock/{epoch:08d}.json", json.dumps(owner.__dict__))


def test_ten_thousand_run_ids_are_unique():
    ids = {new_run_id("grpo") for _ in range(10_000)}
    assert len(ids) == 10_000


def test_only_one_of_concurrent_creators_gets_the_file(store):
    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda i: store.create_bytes("r/x.json", b"%d" % i), range(16)))
    assert won.count(True) == 1
    assert store.read_bytes("r/x.json") == b"%d" % won.index(True)


def test_runs_started_together_never_share_a_directory(store):
    fresh = count()
    ids = ["clash", "clash", "clash", "clash"]

    def claim(_: int) -> RunLock:
        # every claimer first draws the same id; the losers must draw another
        drawn: list[str] = []

        def make() -> str:
            drawn.append("clash" if not drawn else f"run-{next(fresh)}")
            return drawn[-1]

        return claim_new_run(store, make, lease_s=60)

    with ThreadPoolExecutor(4) as pool:
        locks = list(pool.map(claim, range(len(ids))))
    run_ids = [lock.run_id for lock in locks]
    assert len(set(run_ids)) == 4 and run_ids.count("clash") == 1
    for lock in locks:
        assert lock.current()[1].pid == os.getpid()
        lock.release()


def _take(root: str, queue: multiprocessing.Queue) -> None:
    queue.put(RunLock(Storage(root), "same", lease_s=60).acquire(new=True))


def test_processes_creating_one_run_have_one_winner(tmp_path):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_take, args=(str(tmp_path), queue)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join()
    assert sorted(results) == [False, False, False, True]
    assert Storage(str(tmp_path)).list("same/lock") == ["00000001.json"]


def test_a_live_run_refuses_a_second_holder(store):
    first = RunLock(store, "r", lease_s=60)
    assert first.acquire(new=True)
    second = RunLock(store, "r", lease_s=60)
    assert f"pid {os.getpid()}" in second.refusal()
    with pytest.raises(InputError, match="r is running: held by pid .* refused") as err:
        second.acquire()
    assert err.value.path == "--resume"
    assert store.list("r/lock") == ["00000001.json"]  # nothing written by the refused one
    first.release()
    assert second.refusal() is None
    second.acquire()
    assert second.epoch == 2 and store.list("r/lock") == ["00000001.json", "00000002.json"]
    second.release()


def test_a_killed_owner_on_this_host_frees_the_run_at_once(store):
    proc = multiprocessing.get_context("fork").Process(target=time.sleep, args=(0,))
    proc.start()
    proc.join()  # a pid that existed and is gone, as after a SIGKILL
    now = time.time()
    _write_owner(store, "r", 1, LockOwner(socket.gethostname(), proc.pid, now, now))
    lock = RunLock(store, "r", lease_s=3600)
    lock.acquire()
    assert lock.epoch == 2
    lock.release()


def test_another_hosts_owner_holds_until_its_lease_runs_out(store):
    now = time.time()
    _write_owner(store, "r", 1, LockOwner("elsewhere", 1, now, now))
    with pytest.raises(InputError, match="pid 1 on elsewhere"):
        RunLock(store, "r", lease_s=60).acquire()
    _write_owner(store, "r", 1, LockOwner("elsewhere", 1, now - 120, now - 61))
    lock = RunLock(store, "r", lease_s=60)
    lock.acquire()
    assert lock.epoch == 2
    lock.release()


def test_the_heartbeat_renews_the_lease_and_a_taken_over_holder_stops(store):
    lock = RunLock(store, "r", lease_s=0.4)
    lock.acquire(new=True)
    first = lock.current()[1].heartbeat
    time.sleep(0.5)
    assert lock.current()[1].heartbeat > first  # renewed by the heartbeat thread
    now = time.time()
    _write_owner(store, "r", 2, LockOwner("elsewhere", 1, now, now))  # a takeover
    lock.heartbeat()
    with pytest.raises(RunError, match="taken over by lock epoch 2"):
        lock.check()
    lock.release()
    assert not lock.current()[1].released  # the new holder's epoch is untouched


def test_this_process_may_resume_a_run_none_of_its_locks_holds(store):
    now = time.time()  # a run that failed here and could not mark its lock released
    _write_owner(store, "r", 1, LockOwner(socket.gethostname(), os.getpid(), now, now))
    lock = RunLock(store, "r", lease_s=3600)
    lock.acquire()
    assert lock.epoch == 2
    with pytest.raises(InputError, match="is running"):  # while this lock holds it
        RunLock(store, "r", lease_s=3600).acquire()
    lock.release()
