"""TrackerSet: fans each call out to every tracker, on one background thread, so a slow or
dead tracker server never holds up training; a tracker that raises is switched off with one
warning and the others carry on."""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from rldag.report.trackers.base import Tracker

log = logging.getLogger("rldag.trackers")


class TrackerWarning(RuntimeWarning):
    """A tracker failed and was switched off; the run goes on."""


class TrackerSet:
    """Every call is queued and runs later, in order, on the set's thread. Failures are
    reported from the caller's thread (the next call, or close), so the warning reaches the
    terminal and the Prefect run's logs."""

    def __init__(self, trackers: Sequence[Tracker], run_id: str) -> None:
        self.trackers = list(trackers)
        self.run_id = run_id
        self.failed: dict[str, str] = {}  # tracker name -> the error that switched it off
        self._unreported: list[str] = []
        self._thread = (
            ThreadPoolExecutor(1, thread_name_prefix="rldag-trackers") if trackers else None
        )
        self._closed = False
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.trackers)

    def call(self, action: Callable[[Tracker], object]) -> None:
        """Queue `action(tracker)` for every tracker still on."""
        self._report()
        with self._lock:
            if self._thread is not None and not self._closed:
                self._thread.submit(self._fan_out, action)

    def _fan_out(self, action: Callable[[Tracker], object]) -> None:
        for tracker in self.trackers:
            if tracker.name in self.failed:
                continue
            try:
                action(tracker)
            except Exception as err:  # a tracker must never stop a run
                first_line = (str(err).splitlines() or [""])[0][:300]
                with self._lock:
                    self.failed[tracker.name] = f"{type(err).__name__}: {first_line}"
                    self._unreported.append(tracker.name)
                self._finish_quietly(tracker)

    @staticmethod
    def _finish_quietly(tracker: Tracker) -> None:
        try:  # release what it holds (files, a W&B service); it may fail again
            tracker.finish(False)
        except Exception as err:
            log.debug("tracker %s could not close after failing: %r", tracker.name, err)

    def _report(self) -> None:
        with self._lock:
            names, self._unreported = self._unreported, []
        for name in names:
            message = (
                f"tracker {name} failed ({self.failed[name]}); it records nothing more of "
                f"run {self.run_id}, the run goes on"
            )
            log.warning(message)
            warnings.warn(message, TrackerWarning, stacklevel=3)

    def close(self, ok: bool) -> None:
        """Finish every tracker's run and wait until everything queued is done (idempotent)."""
        self.call(lambda tracker: tracker.finish(ok))
        with self._lock:
            closing = not self._closed and self._thread is not None
            self._closed = True
        if closing:
            self._thread.shutdown(wait=True)
        self._report()
