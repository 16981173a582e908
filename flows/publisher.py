"""Publishing artifacts off the RL loop's critical path.

Each artifact is a round trip to the Prefect API (a database write on the server, ~10 ms);
three per iteration were about a third of an iteration of the default pipeline. The
`Publisher` runs those calls on one background thread, in submission order, each inside a
copy of the caller's context, so an artifact still lands on the (sub)flow run that asked for
it. A failed call is logged, never raised: artifacts are for people watching, and a run does
not fail over them. `close` waits for everything submitted.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("rldag.flows")

PROGRESS_EVERY_S = 1.0  # the progress bar is refreshed at most this often (and at the end)


class Publisher:
    """One background thread that makes the artifact calls handed to it."""

    def __init__(self) -> None:
        self._calls: queue.Queue = queue.Queue()
        self._last_progress = float("-inf")
        self._thread = threading.Thread(target=self._work, name="rldag-artifacts", daemon=True)
        self._thread.start()

    def submit(self, call: Callable[..., Any], *args: Any) -> None:
        """Run `call(*args)` in the background, in the caller's (flow run) context."""
        self._calls.put((contextvars.copy_context(), call, args))

    def progress(self, call: Callable[..., Any], *args: Any, final: bool = False) -> None:
        """Like `submit`, for a progress update: skipped if the last one was under
        PROGRESS_EVERY_S ago, unless `final`."""
        now = time.monotonic()
        if final or now - self._last_progress >= PROGRESS_EVERY_S:
            self._last_progress = now
            self.submit(call, *args)

    def close(self) -> None:
        """Wait until every submitted call has run."""
        self._calls.put(None)
        self._thread.join()

    def _work(self) -> None:
        while (item := self._calls.get()) is not None:
            context, call, args = item
            try:
                context.run(call, *args)
            except Exception as err:  # an artifact is not worth failing a run over
                log.warning("could not publish %s: %r", getattr(call, "__name__", call), err)
