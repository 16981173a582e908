"""The sandbox's public value types: limits, test specifications and execution results."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class ExecStatus(StrEnum):
    """How a sandboxed program ended (the ``exec_status`` column). The zygote, loaded by
    source inside the sandbox, reports the first four by these same values."""

    ok = "ok"  # exited 0
    error = "error"  # non-zero exit, e.g. an exception
    timeout = "timeout"  # wall or CPU limit
    killed = "killed"  # signal, output or memory limit, or a broken sandbox slot
    refused = "refused"  # never ran (bad tests, program too large)


@dataclass(frozen=True)
class SandboxLimits:
    """Per-execution limits. Each execution (one program run, or one stdin/stdout case) gets
    its own wall clock and CPU budget; memory is the address-space limit of the run."""

    wall_seconds: float = 5.0
    cpu_seconds: float = 5.0
    memory_mb: int = 256
    max_processes: int = 16
    max_file_mb: int = 16
    max_output_bytes: int = 65536
    scratch_mb: int = 64
    max_program_bytes: int = 8 << 20  # program + tests + stdin of one execution
    max_result_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        if self.wall_seconds <= 0 or self.cpu_seconds <= 0:
            raise ValueError("wall_seconds and cpu_seconds must be positive")
        if self.memory_mb < 64:
            raise ValueError("memory_mb must be at least 64 (the interpreter itself needs ~30)")
        if self.max_processes < 1 or self.max_file_mb < 1 or self.max_output_bytes < 1:
            raise ValueError("max_processes, max_file_mb and max_output_bytes must be >= 1")


@dataclass(frozen=True)
class IOCase:
    """One stdin/stdout test case. `output` stays on the host; only `input` enters."""

    input: str
    output: str


@dataclass(frozen=True)
class TestSpec:
    """Tests for one program: assert-style code, or stdin/stdout cases (not both).

    `asserts` is Python source: top-level `assert` statements are the tests, other statements
    are setup run after the program. With `entry_point`, a HumanEval-style
    `def check(candidate): assert candidate(...) == ...` is expanded into top-level asserts.
    """

    __test__ = False  # not a pytest test class

    asserts: str = ""
    io: tuple[IOCase, ...] = ()
    entry_point: str | None = None

    def __post_init__(self) -> None:
        if self.asserts and self.io:
            raise ValueError("a TestSpec has assert-style tests or stdin/stdout cases, not both")

    @classmethod
    def parse(cls, obj: Any, entry_point: str | None = None) -> TestSpec | None:
        """Build a TestSpec from common dataset shapes; None when there are no tests.

        Accepts: a TestSpec; assert source (str); a JSON string of any shape below; a list of
        assert strings (MBPP `test_list`); a list of {input, output} dicts; a dict with
        `inputs`/`outputs` lists (APPS), `asserts`/`test`/`tests`/`test_list` (+ optional
        `test_setup_code`, `entry_point`) or `io`/`cases`.
        """
        if obj is None or isinstance(obj, TestSpec):
            return obj
        if isinstance(obj, str):
            text = obj.strip()
            if not text:
                return None
            if text[0] in "[{":
                try:
                    return cls.parse(json.loads(text), entry_point)
                except (json.JSONDecodeError, ValueError):
                    pass
            return cls(asserts=obj, entry_point=entry_point)
        if isinstance(obj, list | tuple):
            if not obj:
                return None
            if all(isinstance(x, str) for x in obj):
                return cls(asserts="\n".join(obj), entry_point=entry_point)
            if all(isinstance(x, dict) for x in obj):
                return cls(io=tuple(IOCase(_text(x["input"]), _text(x["output"])) for x in obj))
        if isinstance(obj, dict):
            entry = obj.get("entry_point") or entry_point
            if "inputs" in obj and "outputs" in obj:
                pairs = zip(obj["inputs"], obj["outputs"], strict=True)
                return cls(io=tuple(IOCase(_text(i), _text(o)) for i, o in pairs))
            for key in ("io", "cases"):
                if key in obj:
                    return cls.parse(list(obj[key]), entry)
            for key in ("asserts", "test", "tests", "test_list"):
                if key in obj:
                    body = obj[key]
                    body = "\n".join(body) if isinstance(body, list | tuple) else str(body)
                    setup = obj.get("test_setup_code") or ""
                    return cls(asserts=f"{setup}\n{body}" if setup else body, entry_point=entry)
        raise ValueError(f"cannot read tests from a {type(obj).__name__}: {str(obj)[:80]!r}")


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "\n".join(str(v) for v in value)
    return str(value)


@dataclass
class ExecResult:
    """The outcome of one sandboxed program, with the sandbox columns of DESIGN.md."""

    exec_status: ExecStatus
    exit_code: int | None
    stdout: str
    stderr: str
    tests_passed: int = 0
    tests_total: int = 0
    exec_seconds: float = 0.0
    max_rss_kb: int = 0
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    COLUMNS = (
        "exec_status",
        "exit_code",
        "stdout",
        "stderr",
        "tests_passed",
        "tests_total",
        "exec_seconds",
    )

    @property
    def passed(self) -> bool:
        """True when there were tests and all of them passed."""
        return self.tests_total > 0 and self.tests_passed == self.tests_total

    def row(self) -> dict[str, Any]:
        """The sandbox columns only (what the `sandbox` node adds to each row)."""
        return {k: getattr(self, k) for k in self.COLUMNS}

    def to_dict(self) -> dict[str, Any]:
        """Everything, JSON-serialisable (for `rldag sandbox` output)."""
        out = asdict(self)
        out.pop("extra")
        return out
