"""The processes a command started, for tests that check nothing outlives it: every
descendant seen while it ran (psutil's children(recursive=True), polled), and every process
that carries the environment mark it was started with (one that was reparented before a poll
saw it: a daemonized Ray process, a server in its own session)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import psutil

MARK = "RLDAG_TEST_PROCESS_TREE"


class ProcessTree:
    """A command started with a mark in its environment, whose descendants are recorded by
    `poll()` (call it while it runs: `wait()` does until it exits)."""

    def __init__(self, args: Sequence[str], cwd: Path, env: dict[str, str], log: Path) -> None:
        self.mark = uuid.uuid4().hex
        self.log = log
        with open(log, "wb") as out:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                list(args),
                cwd=cwd,
                env={**env, MARK: self.mark},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # the test's cleanup may end its whole group
            )
        self.seen: dict[int, psutil.Process] = {}
        self.commands: dict[int, str] = {}  # of each process seen, when last seen alive

    def poll(self) -> int | None:
        """Record the descendants alive now; the exit code once it has ended."""
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:  # it has just ended
            children = []
        for child in children:
            self.seen.setdefault(child.pid, child)
            # every poll: a process seen between its fork and its exec still showed its
            # parent's command line (the Prefect server as `flows.cli run`); one that is
            # exiting shows none (its memory is gone before it is a zombie): kept as it was
            self._record(child)
        return self.proc.poll()

    def scan(self) -> None:
        """Record every living process that carries the mark, descendant or not (one that
        was reparented, or started between two polls and still running)."""
        self.poll()
        for process in psutil.process_iter():
            if process.pid != os.getpid() and _marked(process, self):
                self.seen.setdefault(process.pid, process)
                self._record(process)

    def _record(self, process: psutil.Process) -> None:
        """Its command line, unless it has none to show now (ended, or exiting)."""
        try:
            line = process.cmdline()
        except psutil.Error:
            return
        if line:
            self.commands[process.pid] = _line(process.pid, line)

    def started(self, command: str) -> bool:
        """Whether a process it started had `command` in its command line."""
        return any(command in line for line in self.commands.values())

    def wait(self, timeout: float) -> int:
        """Wait for its exit, recording descendants; its exit code."""
        deadline = time.monotonic() + timeout
        while (code := self.poll()) is None:
            assert time.monotonic() < deadline, f"still running after {timeout}s: {self.tail()}"
            time.sleep(0.1)
        return code

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def left(self, settle_s: float = 5.0) -> list[str]:
        """The command lines of the processes it started that still live (none are zombies
        once their parent has reaped them); waits up to `settle_s` for the last to end."""
        deadline = time.monotonic() + settle_s
        while (alive := self._alive()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return alive

    def _alive(self) -> list[str]:
        alive: dict[int, psutil.Process] = {}
        for pid, process in self.seen.items():
            if _living(process):
                alive[pid] = process
        for process in psutil.process_iter():
            if process.pid not in alive and process.pid != os.getpid() and _marked(process, self):
                alive[process.pid] = process
        return [_describe(p) for p in alive.values()]

    def kill(self) -> None:
        """End what is left of it (a failed test's cleanup)."""
        self.poll()
        for process in self.seen.values():
            if _living(process):
                process.kill()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def _living(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _marked(process: psutil.Process, tree: ProcessTree) -> bool:
    try:
        return process.environ().get(MARK) == tree.mark and _living(process)
    except psutil.Error:  # another user's process, or gone
        return False


def _describe(process: psutil.Process) -> str:
    try:
        return _line(process.pid, process.cmdline())
    except psutil.Error:
        return f"{process.pid} (ended)"


def _line(pid: int, command: list[str]) -> str:
    return f"{pid} {' '.join(command)[:160]}"
