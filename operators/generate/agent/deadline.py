"""Calls bounded in time: a function run on a daemon worker thread, abandoned when it overruns.

Python cannot kill a thread; a hung call keeps its (daemon) worker until it returns, but the
caller goes on at the deadline and the process can still exit. Workers are reused: a call
runs on an idle one and a new one starts only when none is idle (an episode makes several
bounded calls a turn; starting a thread for each cost more than the calls of a fast tool).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import Any


class CallTimeout(Exception):
    """The call did not return within its deadline."""


class _Workers:
    """Daemon threads taking calls from one queue; ``idle`` counts those free to take one."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future]] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.idle = 0

    def submit(self, fn: Callable[[], Any]) -> Future:
        future: Future = Future()
        with self.lock:
            start = self.idle == 0
            self.idle -= not start  # an idle worker is claimed for this call
        if start:
            threading.Thread(target=self._work, name="rldag-bounded-call", daemon=True).start()
        self.jobs.put((fn, future))
        return future

    def _work(self) -> None:
        while True:
            fn, future = self.jobs.get()
            try:
                future.set_result(fn())
            except BaseException as err:  # handed to the caller
                future.set_exception(err)
            del fn, future  # hold nothing while idle
            with self.lock:
                self.idle += 1


_WORKERS = _Workers()
os.register_at_fork(after_in_child=lambda: globals().update(_WORKERS=_Workers()))  # no threads


def in_worker(fn: Callable[[], Any]) -> Future:
    """``fn()`` started on a worker thread: its future."""
    return _WORKERS.submit(fn)


def call_with_deadline(fn: Callable[[], Any], timeout_s: float | None) -> Any:
    """``fn()``'s value, its exception re-raised, or CallTimeout after ``timeout_s`` (None or
    <= 0: no deadline, called in this thread)."""
    if not timeout_s or timeout_s <= 0:
        return fn()
    future = in_worker(fn)
    if not wait([future], timeout_s).done:
        raise CallTimeout(f"no answer within {timeout_s:g}s")
    return future.result()
