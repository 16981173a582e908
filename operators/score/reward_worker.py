"""Reward calls in a forked worker process, each bounded by a timeout.

A hung pure-Python function cannot be stopped from a thread; a process can be killed. The
worker is forked from the score node's process, so it inherits the imported reward function
and nothing is imported again. It scores a list of rows and sends the outcomes back in
batches (at most every `FLUSH_S`); before each call it writes the row's index to shared
memory. When no batch arrives for `timeout_s + FLUSH_S`, the row in progress has run for
at least `timeout_s`: the worker is killed with its process group, that row times out, and
the rows after it go to a fresh fork (rows finished but not yet sent, under `FLUSH_S` of
work, run again). A worker that dies (segfault, ``os._exit``) fails only its current row.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from operators.score.reward_call import RewardArgs, RewardFn, RewardOutcome, call_reward

FLUSH_S = 0.005  # the worker sends finished outcomes at least this often
_PARENT_CHECK_S = 1.0  # how often an idle worker checks that its parent is alive


def _serve(fn: RewardFn, conn: Connection, parent_end: Connection, current: Any) -> None:
    """The worker's loop: receive a list of rows, send back their outcomes in batches."""
    parent = os.getppid()
    parent_end.close()
    os.setpgrp()  # so a kill reaches whatever the reward function started
    gc.freeze()  # keep the inherited heap shared: the collector never touches it
    while True:
        while not conn.poll(_PARENT_CHECK_S):
            if os.getppid() != parent:
                return
        try:
            rows = conn.recv()
        except EOFError:
            return
        done: list[tuple] = []
        last = time.monotonic()
        for index, row in enumerate(rows):
            current.value = index
            done.append(tuple(call_reward(fn, row)))
            if time.monotonic() - last >= FLUSH_S or index == len(rows) - 1:
                conn.send(done)
                done, last = [], time.monotonic()


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


class ForkedRewardCalls:
    """Calls `fn` on rows in a forked worker, stopping any call after `timeout_s` seconds."""

    def __init__(self, fn: RewardFn, timeout_s: float) -> None:
        self.fn = fn
        self.timeout_s = timeout_s
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        self._current: Any = None  # shared int: the row the worker is calling now
        self.restarts = 0  # workers replaced after a timeout or a death

    def _start(self) -> Connection:
        if self._conn is None:
            ctx = multiprocessing.get_context("fork")
            ours, theirs = ctx.Pipe()
            self._current = ctx.RawValue("q", 0)
            self._process = ctx.Process(
                target=_serve, args=(self.fn, theirs, ours, self._current), daemon=True
            )
            self._process.start()
            theirs.close()
            self._conn = ours
        return self._conn

    def _stop(self) -> int | None:
        """Kill the worker and its process group; its exit code (None if none ran)."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if process is None or conn is None:
            return None
        conn.close()
        if process.exitcode is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:  # before its setpgrp, or already gone
                process.kill()
        process.join()
        return process.exitcode

    def _lost(self, error: str) -> tuple[int, RewardOutcome]:
        """Kill the worker after a lost row: (the row's index in the batch, its outcome)."""
        stuck = int(self._current.value)
        code = self._stop()
        self.restarts += 1
        return stuck, RewardOutcome(error=error.format(exit=_exit_text(code)))

    def _batch(self, conn: Connection) -> list[RewardOutcome] | tuple[int, RewardOutcome]:
        """The next outcomes the worker sent, or (index, outcome) of the row that was lost."""
        if not conn.poll(self.timeout_s + FLUSH_S):
            return self._lost(f"timed out after {self.timeout_s:g} s (the call was stopped)")
        try:
            return [RewardOutcome(*o) for o in conn.recv()]
        except (EOFError, OSError):
            return self._lost("the reward worker process died ({exit})")

    def _send(self, rows: list[RewardArgs]) -> Connection:
        """Hand `rows` to the worker (a fresh one if the last died while idle)."""
        conn = self._start()
        self._current.value = 0
        try:
            conn.send(rows)
        except OSError:
            self._stop()
            conn = self._start()
            conn.send(rows)
        return conn

    def __call__(self, rows: list[RewardArgs]) -> Iterator[RewardOutcome]:
        """Outcomes in row order. Closing the iterator early kills the worker (it may still
        be busy with later rows)."""
        done = 0
        lost: dict[int, RewardOutcome] = {}  # rows whose call timed out or killed the worker
        try:
            while done < len(rows):
                if done in lost:
                    done += 1
                    yield lost.pop(done - 1)
                    continue
                start, end = done, min([i for i in lost if i > done], default=len(rows))
                conn = self._send(rows[start:end])
                while done < end:
                    batch = self._batch(conn)
                    if isinstance(batch, tuple):  # the worker is gone; finished rows after
                        lost[start + batch[0]] = batch[1]  # `done` run again
                        break
                    for outcome in batch:
                        done += 1
                        yield outcome
        finally:
            if done < len(rows):
                self._stop()

    def close(self) -> None:
        """Stop the worker."""
        self._stop()
