"""The sandbox tests' limits and host-side probes (canary servers and processes, /proc scans) used
to check an attack had no effect; the sandbox node's columns."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from pathlib import Path

from operators.sandbox import SandboxLimits, uids

LIMITS = SandboxLimits(
    wall_seconds=1.5, cpu_seconds=1.5, memory_mb=192, max_processes=12, max_output_bytes=32768
)


def held_uids() -> frozenset[int]:
    """The slot uids this process's sandbox slots hold now: a test-only look at the library's
    private state, in this one place."""
    with uids._lock:
        return frozenset(uids._held)


def marker() -> str:
    """A unique string to look for on the host."""
    return f"rldag-attack-{uuid.uuid4().hex}"


def processes_with(needle: str) -> list[int]:
    """Host pids whose command line or environment contains needle (psutil-free)."""
    found, raw = [], needle.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        for name in ("cmdline", "environ"):
            try:
                if raw in (entry / name).read_bytes():
                    found.append(int(entry.name))
                    break
            except OSError:
                continue
    return found


def slot_processes() -> list[tuple[int, int, list[str]]]:
    """Host processes running as a uid of this process's sandbox slots: (pid, uid, argv).
    Slot uids are exclusive on the host, so other processes' sandboxes (another test worker)
    never show here, and a process that escaped its run still does."""
    mine, out = held_uids(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            uid = int((entry / "status").read_text().split("\nUid:")[1].split()[0])
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if uid in mine:
            out.append((int(entry.name), uid, [a.decode("utf-8", "replace")[:60] for a in argv]))
    return out


def assert_only_zygotes_left() -> None:
    """Each slot uid may own only its bwrap monitor and its zygote, nothing a run started."""
    procs = slot_processes()
    extra = [p for p in procs if not (p[2][0].endswith("bwrap") or p[2][1:4] == ["-I", "-B", "-c"])]
    assert not extra, f"processes outlived their run: {extra}"
    uids = [uid for _, uid, _ in procs]
    assert all(uids.count(u) <= 2 for u in uids), f"too many slot processes: {procs}"


class Listener:
    """A host TCP or unix server in a thread that records any connection."""

    def __init__(self, family: int, address: object) -> None:
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(address)
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.connections = 0
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        self.sock.close()


def host_ip() -> str:
    """This machine's outward-facing address (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


SANDBOX_COLUMNS = (  # DESIGN.md's sandbox columns
    "exec_status",
    "exit_code",
    "stdout",
    "stderr",
    "tests_passed",
    "tests_total",
    "exec_seconds",
)
