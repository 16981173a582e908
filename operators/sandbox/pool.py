"""`Sandbox`: a pool of isolated worker slots that runs untrusted programs and judges tests."""

from __future__ import annotations

import json
import logging
import queue
import threading
import weakref
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from operators.sandbox import host
from operators.sandbox.judge import compile_tests, judge, output_matches
from operators.sandbox.slot import Reply, SandboxUnavailable, Slot, SlotBroken
from operators.sandbox.spec import ExecResult, ExecStatus, SandboxLimits, TestSpec

log = logging.getLogger("rldag.sandbox")
ISOLATIONS = ("full", "none")
_REPLY_GRACE = 10.0


@dataclass(frozen=True)
class Job:
    """One program to run, with optional tests and stdin."""

    program: str
    tests: TestSpec | None = None
    stdin: str = ""


class Sandbox:
    """A pool of `concurrency` isolated slots, reusable across many runs; close() at the end.

    isolation="full" (default) refuses with SandboxUnavailable naming what the host lacks;
    isolation="none" runs programs as plain forked processes with rlimits only, and logs a
    warning on every run.
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        concurrency: int = 2,
        isolation: str = "full",
        interpreter: str | None = None,
    ) -> None:
        if isolation not in ISOLATIONS:
            raise ValueError(f"isolation must be one of {ISOLATIONS}, not {isolation!r}")
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.limits = limits or SandboxLimits()
        self.isolation = isolation
        self.concurrency = concurrency
        if isolation == "full":
            missing = host.check_host()
            if missing:
                raise SandboxUnavailable(missing)
        else:
            log.warning(
                "sandbox isolation is OFF (isolation: none): untrusted code runs on the host"
            )
        interp = interpreter or host.find_interpreter()
        if interp is None:
            raise SandboxUnavailable(["a world-readable system python3"])
        self._slots = [
            Slot(i, self.limits, isolation == "full", interp) for i in range(concurrency)
        ]
        self._idle: queue.SimpleQueue[Slot] = queue.SimpleQueue()
        self._closed = False
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._finalizer = weakref.finalize(self, _close_slots, self._slots)
        try:
            starters = [threading.Thread(target=s.start) for s in self._slots[1:]]
            for t in starters:
                t.start()
            self._slots[0].start()  # errors of the first slot surface here
            for t in starters:
                t.join()
            for slot in self._slots:
                if slot.proc is None:
                    slot.start()
                self._idle.put(slot)
        except BaseException:
            self.close()
            raise

    @property
    def report(self) -> dict[str, Any]:
        """What the first slot's zygote reported about its isolation."""
        return dict(self._slots[0].report)

    def run(self, program: str, tests: TestSpec | None = None, stdin: str = "") -> ExecResult:
        """Run one program (with its tests) in a free slot; blocks while all slots are busy."""
        if self._closed:
            raise RuntimeError("Sandbox is closed")
        if self.isolation == "none":
            log.warning("running untrusted code WITHOUT isolation (isolation: none)")
        if tests is not None and not isinstance(tests, TestSpec):
            tests = TestSpec.parse(tests)
        if tests is not None and tests.io:
            return self._run_io(program, tests)
        if tests is not None and tests.asserts.strip():
            return self._run_asserts(program, tests, stdin)
        return self._result(self._execute({"mode": "plain", "program": program, "stdin": stdin}))

    def run_many(self, jobs: Iterable[Job | tuple | dict]) -> list[ExecResult]:
        """Run many jobs using all slots concurrently; results in the order of `jobs`."""
        norm = [_as_job(j) for j in jobs]
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.concurrency, "rldag-sandbox")
        return list(self._executor.map(lambda j: self.run(j.program, j.tests, j.stdin), norm))

    def close(self) -> None:
        """Stop every slot (idempotent)."""
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self._finalizer()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------

    def _run_asserts(self, program: str, tests: TestSpec, stdin: str) -> ExecResult:
        try:
            compiled = compile_tests(tests.asserts, tests.entry_point)
        except SyntaxError as exc:
            return ExecResult(ExecStatus.refused, None, "", "", detail=f"tests: {exc}")
        job = {
            "mode": "asserts",
            "program": program,
            "setup": compiled.setup,
            "probes": compiled.probes,
            "stdin": stdin,
        }
        reply = self._execute(job)
        result = self._result(reply)
        result.tests_total = compiled.total
        if isinstance(reply, Reply):
            result.tests_passed = judge(compiled, reply.results)
        return result

    def _run_io(self, program: str, tests: TestSpec) -> ExecResult:
        results, passed = [], 0
        for case in tests.io:
            reply = self._execute({"mode": "plain", "program": program, "stdin": case.input})
            res = self._result(reply)
            results.append(res)
            if res.exec_status == ExecStatus.ok and output_matches(res.stdout, case.output):
                passed += 1
            if res.exec_status in (ExecStatus.timeout, ExecStatus.refused):
                break  # the remaining cases count as failed
        shown = next((r for r in results if r.exec_status != ExecStatus.ok), results[-1])
        return ExecResult(
            exec_status=shown.exec_status,
            exit_code=shown.exit_code,
            stdout=shown.stdout,
            stderr=shown.stderr,
            tests_passed=passed,
            tests_total=len(tests.io),
            exec_seconds=sum(r.exec_seconds for r in results),
            max_rss_kb=max(r.max_rss_kb for r in results),
            detail=shown.detail,
        )

    def _execute(self, job: dict[str, Any]) -> Reply | ExecResult:
        payload = json.dumps(job, ensure_ascii=False).encode("utf-8", "surrogatepass")
        if len(payload) > self.limits.max_program_bytes:
            detail = f"program, tests and stdin exceed {self.limits.max_program_bytes} bytes"
            return ExecResult(ExecStatus.refused, None, "", "", detail=detail)
        slot = self._idle.get()
        try:
            return slot.execute(payload, self.limits.wall_seconds + _REPLY_GRACE)
        except SlotBroken as exc:
            slot.kill()
            detail = f"sandbox slot failed: {exc}"
            return ExecResult(ExecStatus.killed, None, "", "", detail=detail)
        finally:
            self._recycle(slot)

    def _recycle(self, slot: Slot) -> None:
        try:
            alive = slot.proc is not None and slot.proc.poll() is None
            if (slot.dirty or not alive) and not self._closed:
                slot.kill()
                slot.start()
        except Exception:  # noqa: BLE001 - keep the pool usable; the next run reports it
            log.exception("could not restart sandbox slot %d", slot.index)
        finally:
            self._idle.put(slot)

    def _result(self, reply: Reply | ExecResult) -> ExecResult:
        if isinstance(reply, ExecResult):
            return reply
        h = reply.header
        stderr = reply.stderr.decode("utf-8", "replace")
        detail = ""
        if "output_limit" in h["flags"]:
            detail = f"output limit of {self.limits.max_output_bytes} bytes exceeded"
        elif "memory_limit" in h["flags"]:
            detail = f"memory limit of {self.limits.memory_mb} MB (all processes) exceeded"
        elif h["status"] == ExecStatus.timeout:
            detail = "wall-clock or CPU time limit exceeded"
        code = h["exit_code"] if h["signal"] is None else -h["signal"]
        if h.get("recycle"):
            detail = (detail + "; " if detail else "") + "scratch not cleanable, slot recycled"
        return ExecResult(
            exec_status=ExecStatus(h["status"]),
            exit_code=code,
            stdout=reply.stdout.decode("utf-8", "replace"),
            stderr=stderr,
            exec_seconds=round(h["seconds"], 6),
            max_rss_kb=h["max_rss_kb"],
            detail=detail,
        )


def _as_job(job: Job | tuple | dict) -> Job:
    if isinstance(job, Job):
        return job
    if isinstance(job, dict):
        return Job(job["program"], TestSpec.parse(job.get("tests")), job.get("stdin", ""))
    return Job(*job)


def _close_slots(slots: list[Slot]) -> None:
    for slot in slots:
        slot.close()
