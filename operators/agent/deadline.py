"""Calls bounded in time: a function run on a daemon thread, abandoned when it overruns.

Python cannot kill a thread; a hung call keeps its (daemon) thread until it returns, but the
caller goes on at the deadline and the process can still exit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class CallTimeout(Exception):
    """The call did not return within its deadline."""


def call_with_deadline(fn: Callable[[], Any], timeout_s: float | None) -> Any:
    """``fn()``'s value, its exception re-raised, or CallTimeout after ``timeout_s`` (None or
    <= 0: no deadline, called in this thread)."""
    if not timeout_s or timeout_s <= 0:
        return fn()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as err:  # handed to the caller
            box["error"] = err

    thread = threading.Thread(target=run, name="rldag-bounded-call", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise CallTimeout(f"no answer within {timeout_s:g}s")
    if "error" in box:
        raise box["error"]
    return box["value"]
