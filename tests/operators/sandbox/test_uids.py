"""Slot uids are exclusive on the host, across processes, and a dead holder's uid comes back
(operators/sandbox/uids.py)."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from operators.sandbox import uids
from tests.support.sandbox import held_uids

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="slot uids are allocated as root")


def _hold(conn) -> None:  # a child process: allocate, report, hold until told to exit
    conn.send((os.getpid(), uids.allocate_uid()))
    conn.recv()


def test_another_process_never_gets_a_held_uid_and_gets_it_once_its_holder_exits():
    parent, child = multiprocessing.get_context("fork").Pipe()
    holder = multiprocessing.get_context("fork").Process(target=_hold, args=(child,))
    holder.start()
    holder_pid, held = parent.recv()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "getpid", lambda: holder_pid)  # start where the holder started
        mine = uids.allocate_uid()
    assert held is not None and mine != held
    uids.release_uid(mine)
    parent.send("exit")
    holder.join(10)
    assert holder.exitcode == 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "getpid", lambda: holder_pid)
        again = uids.allocate_uid()  # the kernel dropped the dead holder's lock
    try:
        assert again == held
    finally:
        uids.release_uid(again)
    assert again not in held_uids()
