"""Sandboxed execution of untrusted (model-generated) Python programs.

Public API::

    from operators.sandbox import Sandbox, SandboxLimits, TestSpec, extract_program, check_host

    with Sandbox(SandboxLimits(wall_seconds=2), concurrency=2) as sb:
        res = sb.run(extract_program(response), TestSpec(asserts="assert f(2) == 4"))
        res.exec_status, res.tests_passed, res.tests_total, res.row()

Each slot is a pre-warmed interpreter ("zygote") that is PID 1 of its own bubblewrap sandbox
and forks one child per run; see zygote.py for the isolation layers and judge.py for how tests
are judged on the host so that a program cannot forge a pass.
"""

from operators.sandbox.extract import extract_program
from operators.sandbox.host import check_host
from operators.sandbox.pool import Job, Sandbox
from operators.sandbox.slot import SandboxUnavailable
from operators.sandbox.spec import ExecResult, ExecStatus, IOCase, SandboxLimits, TestSpec

__all__ = [
    "ExecResult",
    "ExecStatus",
    "IOCase",
    "Job",
    "Sandbox",
    "SandboxLimits",
    "SandboxUnavailable",
    "TestSpec",
    "check_host",
    "extract_program",
]
