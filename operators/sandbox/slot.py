"""One worker slot: a zygote in its own bubblewrap sandbox, and the host side of its pipe."""

from __future__ import annotations

import json
import os
import select
import signal
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from operators.sandbox import host, seccomp, uids
from operators.sandbox.spec import SandboxLimits

_U32 = struct.Struct(">I")
START_TIMEOUT = 60.0


class SandboxUnavailable(RuntimeError):
    """The host cannot provide the isolation asked for; `missing` names the layers."""

    def __init__(self, missing: list[str]) -> None:
        self.missing = list(missing)
        super().__init__(
            "sandbox isolation unavailable, missing: "
            + "; ".join(self.missing)
            + " (run scripts/install-system-deps.sh as root, or set `isolation: none` to run "
            "untrusted code without isolation)"
        )


class SlotBroken(RuntimeError):
    """The zygote died, hung or broke the protocol; the slot must be restarted."""


@dataclass
class Reply:
    """A zygote's answer for one execution."""

    header: dict[str, Any]
    stdout: bytes
    stderr: bytes
    results: bytes


@dataclass
class Slot:
    """A sandbox slot; `execute` is not thread-safe (the pool hands a slot to one thread)."""

    index: int
    limits: SandboxLimits
    isolated: bool
    interpreter: str
    proc: subprocess.Popen | None = None
    report: dict[str, Any] = field(default_factory=dict)
    runs: int = 0
    dirty: bool = False
    uid: int | None = None
    _scratch: tempfile.TemporaryDirectory | None = None

    def config(self) -> dict[str, Any]:
        """What the zygote is told (limits; no secrets)."""
        lim = self.limits
        cfg = {
            "isolated": self.isolated,
            "wall_seconds": lim.wall_seconds,
            "cpu_seconds": lim.cpu_seconds,
            "memory_mb": lim.memory_mb,
            "nproc": lim.max_processes + (1 if self.isolated else 0),
            "max_file_mb": lim.max_file_mb,
            "max_output_bytes": lim.max_output_bytes,
            "max_result_bytes": lim.max_result_bytes,
            "max_job_bytes": lim.max_program_bytes,
        }
        if self.isolated:
            cfg.update(scratch=host.SCRATCH, scratch_dirs=[host.SCRATCH, host.SHM])
            cfg["landlock"] = host.landlock_paths()
        else:
            if self._scratch is None:
                self._scratch = tempfile.TemporaryDirectory(prefix="rldag-sandbox-")
            cfg.update(scratch=self._scratch.name, scratch_dirs=[self._scratch.name])
        return cfg

    def start(self) -> None:
        """Start the zygote and check the isolation it reports."""
        argv = host.interpreter_argv(self.interpreter, self.config(), host.module_sources())
        kwargs: dict[str, Any] = {}
        fds: tuple[int, ...] = ()
        if self.isolated:
            fd = os.memfd_create("rldag-seccomp")
            os.write(fd, seccomp.filter_bpf())
            os.lseek(fd, 0, os.SEEK_SET)
            fds = (fd,)
            scratch = self.limits.scratch_mb << 20
            argv = host.bwrap_argv(host.bwrap_path() or "bwrap", fd, scratch) + argv
            if self.uid is None:
                self.uid = uids.allocate_uid()
            if self.uid is not None:
                kwargs.update(user=self.uid, group=self.uid, extra_groups=[])
        self._log = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log,
                pass_fds=fds,
                start_new_session=True,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                cwd="/",
                **kwargs,
            )
        finally:
            for fd in fds:
                os.close(fd)
        try:
            n = _U32.unpack(self._read(4, time.monotonic() + START_TIMEOUT))[0]
            self.report = json.loads(self._read(n, time.monotonic() + 5))
        except SlotBroken as exc:
            self.kill()
            raise SandboxUnavailable([f"sandbox slot failed to start: {self.log_tail()}"]) from exc
        if self.isolated:
            problems = verify_report(self.report)
            if problems:
                self.kill()
                raise SandboxUnavailable(problems)

    def execute(self, job: bytes, timeout: float) -> Reply:
        """Send one job and wait for its reply; SlotBroken when the zygote misbehaves."""
        if self.proc is None or self.proc.poll() is not None:
            raise SlotBroken("slot not running")
        try:
            os.write(self.proc.stdin.fileno(), _U32.pack(len(job)) + job)
        except OSError as exc:
            raise SlotBroken(f"cannot send job: {exc}") from exc
        deadline = time.monotonic() + timeout
        total = _U32.unpack(self._read(4, deadline))[0]
        lim = self.limits
        if total > 2 * lim.max_output_bytes + lim.max_result_bytes + 65536:
            raise SlotBroken("reply larger than the limits allow")
        body = self._read(total, deadline)
        hlen = _U32.unpack(body[:4])[0]
        header = json.loads(body[4 : 4 + hlen])
        a, b, c = header["lens"]
        blobs = body[4 + hlen :]
        self.runs += 1
        self.dirty = bool(header.get("recycle"))
        return Reply(header, blobs[:a], blobs[a : a + b], blobs[a + b : a + b + c])

    def _read(self, n: int, deadline: float) -> bytes:
        assert self.proc is not None and self.proc.stdout is not None
        fd, chunks, got = self.proc.stdout.fileno(), [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise SlotBroken("zygote did not answer in time")
            chunk = os.read(fd, n - got)
            if not chunk:
                raise SlotBroken("zygote exited")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def log_tail(self, limit: int = 2000) -> str:
        """The end of the zygote's own stderr (startup errors)."""
        log = getattr(self, "_log", None)
        if log is None:
            return ""
        log.seek(0)
        return log.read()[-limit:].decode("utf-8", "replace").strip()

    def kill(self) -> None:
        """Stop the slot: close its pipe, then kill its whole process group."""
        proc, self.proc, self.dirty = self.proc, None, False
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()

    def close(self) -> None:
        """Kill the slot and drop its scratch dir."""
        self.kill()
        uids.release_uid(self.uid)
        self.uid = None
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None


def verify_report(report: dict[str, Any]) -> list[str]:
    """Layers a zygote says it lacks (from /proc/self/status inside the sandbox)."""
    problems = []
    if report.get("pid") != 1:
        problems.append("PID namespace (zygote is not PID 1)")
    uid = str(report.get("Uid", "0")).split()
    if not uid or "0" in uid or report.get("uid") == 0:
        problems.append("non-root uid")
    if report.get("Seccomp") != "2":
        problems.append("seccomp filter not active")
    if report.get("NoNewPrivs") != "1":
        problems.append("no_new_privs not set")
    if report.get("CapEff", "").strip("0") or report.get("CapBnd", "").strip("0"):
        problems.append("capabilities not dropped")
    if report.get("dumpable") != 0:
        problems.append("zygote still dumpable (ptrace / /proc/1/mem)")
    if "landlock" not in report:
        problems.append(f"Landlock: {report.get('landlock_error', 'not applied')}")
    return problems
