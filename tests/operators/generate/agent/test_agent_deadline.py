"""Bounded calls (operators/generate/agent/deadline.py): reused workers, abandoned hung calls."""

from __future__ import annotations

import threading

import pytest

from operators.generate.agent.deadline import CallTimeout, call_with_deadline


def test_sequential_calls_reuse_idle_workers():
    before = set(threading.enumerate())  # idle workers of earlier calls among them
    workers = {call_with_deadline(threading.current_thread, 5.0) for _ in range(40)}
    assert len(workers - before) <= 2  # not a thread per call
    assert threading.current_thread() not in workers


def test_a_hung_call_is_abandoned_at_its_deadline_and_others_still_run():
    release = threading.Event()
    with pytest.raises(CallTimeout, match="no answer within 0.05s"):
        call_with_deadline(release.wait, 0.05)
    assert call_with_deadline(lambda: 42, 5.0) == 42  # while the hung call holds its worker
    release.set()


def test_the_calls_own_errors_are_raised_as_they_are():
    def late() -> None:
        raise TimeoutError("the tool's own")

    with pytest.raises(TimeoutError, match="the tool's own"):
        call_with_deadline(late, 5.0)
    assert call_with_deadline(lambda: "inline", None) == "inline"
