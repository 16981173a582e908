"""The artifact publisher runs calls off the loop, in order, in the caller's context."""

from __future__ import annotations

import contextvars
import logging
import threading

import pytest

from flows import publisher as publisher_module
from flows.publisher import Publisher

WHO = contextvars.ContextVar("who", default="nobody")


def test_calls_run_in_order_in_the_callers_context_and_close_waits():
    seen: list[tuple[str, int, str]] = []
    gate = threading.Event()
    pub = Publisher()
    pub.submit(gate.wait)  # the first call blocks the thread: nothing runs inline
    for i in range(5):
        token = WHO.set(f"flow-{i}")
        pub.submit(lambda i: seen.append((WHO.get(), i, threading.current_thread().name)), i)
        WHO.reset(token)
    assert seen == []
    gate.set()
    pub.close()
    assert [(who, i) for who, i, _ in seen] == [(f"flow-{i}", i) for i in range(5)]
    assert {thread for *_, thread in seen} == {"rldag-artifacts"}


def test_a_failing_call_is_logged_and_later_calls_still_run(caplog):
    done = []

    def broken() -> None:
        raise ConnectionError("api down")

    pub = Publisher()
    with caplog.at_level(logging.WARNING, logger="rldag.flows"):
        pub.submit(broken)
        pub.submit(done.append, 1)
        pub.close()
    assert done == [1]
    assert "could not publish broken" in caplog.text and "api down" in caplog.text


def test_progress_updates_are_throttled_but_the_final_one_always_goes(monkeypatch):
    clock = iter([0.0, 0.2, 0.5, 1.3, 1.4, 1.5]).__next__
    monkeypatch.setattr(publisher_module.time, "monotonic", clock)
    sent: list[int] = []
    pub = Publisher()
    for done in range(5):
        pub.progress(sent.append, done)
    pub.progress(sent.append, 5, final=True)
    pub.close()
    assert sent == [0, 3, 5]  # t=0 and t=1.3 (>= 1 s later), then the final one


@pytest.mark.parametrize("calls", [0, 3])
def test_close_returns_with_or_without_pending_calls(calls):
    out: list[int] = []
    pub = Publisher()
    for i in range(calls):
        pub.submit(out.append, i)
    pub.close()
    assert out == list(range(calls))
