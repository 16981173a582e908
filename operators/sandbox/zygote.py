"""The zygote: a pre-warmed fork server running inside one sandbox slot (stdlib only).

The host starts it as PID 1 of a fresh bubblewrap sandbox (own user, mount, PID, network, IPC,
UTS and cgroup namespaces; non-root uid; no capabilities; seccomp filter loaded by bwrap). It
then makes itself non-dumpable (no ptrace, no /proc/1/mem), applies Landlock, pre-imports common
modules and serves jobs from the host, one at a time, over a pipe:

    host -> zygote: u32 length + job (JSON, parsed only by the forked child)
    zygote -> host: u32 length + u32 header length + header JSON + stdout + stderr + results

Per job it forks a child (see harness.py), relays its output with caps, enforces the wall
clock, then kills every other process in the namespace (`kill(-1, SIGKILL)` from PID 1, which
itself cannot be killed from inside), reaps them, wipes the scratch dirs and zeroes its own
buffers, so nothing of a run survives into the next. The zygote never parses a job: the raw
bytes live in one private anonymous map that is zeroed (MADV_DONTNEED) right after the fork;
the output buffers are not mapped in children at all (MADV_DONTFORK). It also bounds the
memory of all processes of a run together (RLIMIT_AS bounds each one).
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import mmap
import os
import select
import signal
import struct
import sys
import time

_U32 = struct.Struct(">I")
_PR_SET_DUMPABLE = 4
MEMORY_CHECK_SECONDS = 0.02
PRELOAD = (
    "array bisect collections copy decimal enum fractions functools heapq io itertools json "
    "math operator random re statistics string textwrap traceback typing"
).split()


def _read_into(fd: int, view: memoryview) -> bool:
    """Fill `view` from fd; False on EOF before anything was read."""
    got = 0
    while got < len(view):
        n = os.readv(fd, [view[got:]])
        if n == 0:
            if got == 0:
                return False
            raise EOFError("control pipe closed mid-frame")
        got += n
    return True


def _write_all(fd: int, parts: list) -> None:
    for part in parts:
        view = memoryview(part)
        while len(view):
            view = view[os.write(fd, view) :]


def _proc_status() -> dict[str, str]:
    with open("/proc/self/status") as fh:
        pairs = (line.split(":", 1) for line in fh if ":" in line)
        return {k: v.strip() for k, v in pairs}


def _run_memory_kb() -> int:
    """Memory of all processes of the run (PSS, or RSS where PSS is unreadable), in KiB.

    RLIMIT_AS bounds each process; this bounds their sum (a fork of memory hogs). Only
    processes other than the zygote (PID 1) count, and a single process is left to RLIMIT_AS.
    """
    pids = [p for p in os.listdir("/proc") if p.isdigit() and p != "1"]
    if len(pids) < 2:
        return 0
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
                for line in fh:
                    if line.startswith(b"Pss:"):
                        total += int(line.split()[1])
                        break
        except (OSError, ValueError):
            try:
                with open(f"/proc/{pid}/statm", "rb") as fh:
                    total += int(fh.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") >> 10)
            except (OSError, ValueError, IndexError):
                pass
    return total


def _wipe(path: str) -> bool:
    """Remove everything under path; True when it is empty afterwards."""
    try:
        with os.scandir(path) as it:
            entries = list(it)
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    os.chmod(entry.path, 0o700)
                    _wipe(entry.path)
                    os.rmdir(entry.path)
                else:
                    os.unlink(entry.path)
            except OSError:
                pass
        return not os.listdir(path)
    except (OSError, RecursionError):
        return False


def _private_map(size: int) -> mmap.mmap:
    """Private anonymous memory (Python's default, MAP_SHARED, would be shared with children
    and survive MADV_DONTNEED)."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


class Zygote:
    """Serves jobs from the host; one forked child per job."""

    def __init__(self, cfg: dict, harness: object, ctl_in: int, ctl_out: int) -> None:
        self.cfg = cfg
        self.harness = harness
        self.ctl_in, self.ctl_out = ctl_in, ctl_out
        self.isolated = bool(cfg["isolated"])
        # Anonymous maps: only pages in use are resident (cheaper forks); zeroed and released
        # with MADV_DONTNEED after each run; output buffers are not even mapped in children.
        self.job = _private_map(cfg["max_job_bytes"])
        out_cap = cfg["max_output_bytes"]
        self.caps = [out_cap, out_cap, cfg["max_result_bytes"]]
        self.bufs = [_private_map(c + 1) for c in self.caps]
        for buf in self.bufs:
            buf.madvise(mmap.MADV_DONTFORK)
        self.hdr = bytearray(4)

    def serve(self) -> None:
        """Run jobs until the host closes the control pipe."""
        while _read_into(self.ctl_in, memoryview(self.hdr)):
            n = _U32.unpack(self.hdr)[0]
            if n > len(self.job):
                raise ValueError("job larger than the zygote's buffer")
            _read_into(self.ctl_in, memoryview(self.job)[:n])
            if not self.execute(n):
                return

    def _kill_all(self, child: int, state: dict) -> None:
        """Kill and reap every process of the run (all of the namespace when PID 1)."""
        while True:
            try:
                if self.isolated:
                    os.kill(-1, signal.SIGKILL)
                elif "status" not in state:
                    os.killpg(child, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                pid, status, usage = os.wait4(-1 if self.isolated else child, 0)
            except ChildProcessError:
                return
            if pid == child:
                state["status"], state["usage"] = status, usage
                if not self.isolated:
                    return

    def execute(self, n: int) -> bool:
        """Fork, run, relay, clean up, reply. False when the slot should be recycled."""
        cfg = self.cfg
        pipes = [os.pipe() for _ in range(3)]
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            for r, _ in pipes:
                os.close(r)
            w = [w for _, w in pipes]
            self.harness.run_child(memoryview(self.job)[:n], cfg, w[0], w[1], w[2])
            os._exit(70)
        if n:
            self.job.madvise(mmap.MADV_DONTNEED, 0, n)
        for _, w in pipes:
            os.close(w)
        counts, state = [0, 0, 0], {}
        fds = {r: i for i, (r, _) in enumerate(pipes)}
        pidfd = os.pidfd_open(pid)
        poller = select.poll()
        for fd in [*fds, pidfd]:
            poller.register(fd, select.POLLIN)
        deadline, flags = t0 + cfg["wall_seconds"], set()
        next_check = t0 + MEMORY_CHECK_SECONDS
        while fds or "status" not in state:
            now = time.monotonic()
            if "status" not in state and now >= deadline:
                flags.add("timeout")
                self._kill_all(pid, state)
                deadline = now + 0.5
            elif "status" in state and now >= deadline:
                break  # only an escaped process (isolation "none") can hold a pipe open
            if "status" not in state and now >= next_check and self.isolated:
                next_check = now + MEMORY_CHECK_SECONDS
                if _run_memory_kb() > cfg["memory_mb"] * 1024:
                    flags.add("memory_limit")
                    self._kill_all(pid, state)
                    deadline = now + 0.5
            wake = deadline if "status" in state else min(deadline, next_check)
            for fd, _ in poller.poll(max(0.0, wake - now) * 1000):
                if fd == pidfd:
                    poller.unregister(pidfd)
                    self._kill_all(pid, state)
                    deadline = time.monotonic() + 0.5
                    continue
                i = fds[fd]
                got = os.readv(fd, [memoryview(self.bufs[i])[counts[i] :]])
                counts[i] += got
                if got == 0 or counts[i] > self.caps[i]:
                    poller.unregister(fd)
                    del fds[fd]
                    os.close(fd)
                if counts[i] > self.caps[i] and "status" not in state:
                    flags.add("output_limit")
                    self._kill_all(pid, state)
                    deadline = time.monotonic() + 0.5
        seconds = time.monotonic() - t0
        for fd in fds:
            os.close(fd)
        os.close(pidfd)
        if "status" not in state:
            self._kill_all(pid, state)
        clean = all([_wipe(p) for p in cfg["scratch_dirs"]])
        self._reply(state, flags, seconds, counts, clean)
        return clean

    def _reply(self, state: dict, flags: set, seconds: float, counts: list, clean: bool) -> None:
        status, usage = state.get("status", 0), state.get("usage")
        cpu = usage.ru_utime + usage.ru_stime if usage else 0.0
        code = os.waitstatus_to_exitcode(status)
        sig = -code if code < 0 else None
        if "timeout" in flags or sig == signal.SIGXCPU:
            verdict = "timeout"
        elif sig == signal.SIGKILL and cpu >= self.cfg["cpu_seconds"]:
            verdict = "timeout"
        elif "output_limit" in flags or "memory_limit" in flags or sig is not None:
            verdict = "killed"
        else:
            verdict = "ok" if code == 0 else "error"
        lens = [min(c, cap) for c, cap in zip(counts, self.caps, strict=True)]
        header = {
            "status": verdict,
            "exit_code": None if sig is not None else code,
            "signal": sig,
            "seconds": seconds,
            "cpu_seconds": cpu,
            "max_rss_kb": usage.ru_maxrss if usage else 0,
            "lens": lens,
            "flags": sorted(flags),
            "recycle": not clean,
        }
        head = json.dumps(header).encode()
        views = [memoryview(b)[:k] for b, k in zip(self.bufs, lens, strict=True)]
        total = 4 + len(head) + sum(lens)
        _write_all(self.ctl_out, [_U32.pack(total), _U32.pack(len(head)), head, *views])
        del views
        for b, c in zip(self.bufs, counts, strict=True):
            if c:
                b.madvise(mmap.MADV_DONTNEED, 0, min(c, len(b)))


def main(cfg: dict, harness: object, landlock: object) -> None:
    """Entry point inside the sandbox: harden, pre-warm, report readiness, serve."""
    ctl_in, ctl_out = os.dup2(0, 100, inheritable=False), os.dup2(1, 101, inheritable=False)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    report: dict = {"pid": os.getpid(), "uid": os.getuid()}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    if cfg["isolated"]:
        libc = ctypes.CDLL(None, use_errno=True)
        report["dumpable"] = 0 if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 else 1
        try:
            report["landlock"] = landlock.restrict_self(**cfg["landlock"])
        except OSError as exc:
            report["landlock_error"] = str(exc)
    os.chdir(cfg["scratch"])
    for name in PRELOAD:
        importlib.import_module(name)
    status = _proc_status()
    for key in ("Seccomp", "NoNewPrivs", "CapEff", "CapBnd", "Uid"):
        report[key] = status.get(key, "")
    zygote = Zygote(cfg, harness, ctl_in, ctl_out)
    harness.prepare()
    gc.collect()
    gc.freeze()
    gc.disable()
    head = json.dumps(report).encode()
    _write_all(ctl_out, [_U32.pack(len(head)), head])
    try:
        zygote.serve()
    except (EOFError, OSError, ValueError) as exc:
        print(f"zygote: {exc!r}", file=sys.stderr)
