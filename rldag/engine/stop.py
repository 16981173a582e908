"""A request to stop a run at a safe point: SIGTERM or SIGINT to `rldag run`, or the flow run
cancelled in Prefect. The driver launches no step once it is made, lets the steps of an
iteration that can still finish (all of its nodes started) end within
`faults.stop_grace_s`, abandons the others (their iteration runs again on `--resume`) and
raises RunStopped; the exit code says what asked (143 SIGTERM, 130 SIGINT or a cancel).

A signal handler runs in the main thread between two bytecodes, wherever that thread is: it
only sets attributes here (no lock), and the driver polls them.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

SIGNAL_EXIT = {signal.SIGTERM: 128 + signal.SIGTERM, signal.SIGINT: 128 + signal.SIGINT}
CANCEL_EXIT = 128 + signal.SIGINT  # a cancel in the Prefect UI: a user's interrupt


@dataclass
class StopRequest:
    """Whether, why and since when a run is asked to stop; `urgent` (a second request) gives
    the steps still finishing no more time."""

    reason: str = ""
    exit_code: int = 0
    since: float | None = None  # time.monotonic() of the first request
    urgent: bool = False

    @property
    def requested(self) -> bool:
        return self.since is not None

    def request(self, reason: str, exit_code: int) -> None:
        """Ask the run to stop; the first request's reason and exit code stand, a second
        one makes it urgent."""
        if self.since is not None:
            self.urgent = True
            return
        self.reason, self.exit_code = reason, exit_code
        self.since = time.monotonic()

    def finishing(self, grace_s: float) -> bool:
        """Whether steps that can still complete their iteration may keep running."""
        return self.since is not None and not self.urgent and self.elapsed() < grace_s

    def elapsed(self) -> float:
        return 0.0 if self.since is None else time.monotonic() - self.since

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.request(signal.Signals(signum).name, SIGNAL_EXIT[signal.Signals(signum)])

    @contextmanager
    def on_signals(self) -> Iterator[StopRequest]:
        """Within the block, SIGTERM and SIGINT request a stop instead of ending the process
        (only the main thread can set handlers; elsewhere nothing changes)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        before = {s: signal.signal(s, self._on_signal) for s in SIGNAL_EXIT}
        try:
            yield self
        finally:
            for s, handler in before.items():
                signal.signal(s, handler)
