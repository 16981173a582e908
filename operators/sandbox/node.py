"""`sandbox.python` node: runs each row's program with its tests in the isolated sandbox.

The program is the last fenced code block of `response` (or the whole response); the tests
come from a dataset column (`ground_truth` by default, as veRL code datasets store them):
assert source, MBPP/HumanEval/APPS shapes or stdin/stdout cases. Pass/fail is judged on the
host. The pool of sandbox slots lives for the whole run; `concurrency` bounds it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from operators.sandbox.spec import ExecResult
from rldag import NodeContext, NodeKind, OperatorDef, Port, check_choice, check_positive, columns


@dataclass
class SandboxParams:
    """Parameters of `sandbox.python` (limits apply to each execution)."""

    tests_column: str = "ground_truth"  # column holding the row's tests
    isolation: str = "full"  # full | none (none: rlimits only, warns on every run)
    concurrency: int = 2  # sandbox slots: the environment pool's concurrency bound
    wall_seconds: float = 5.0  # killed (SIGKILL) after this
    cpu_seconds: float = 5.0
    memory_mb: int = 256
    max_processes: int = 16
    max_output_bytes: int = 65536  # stdout/stderr are capped, never buffered unbounded

    def __post_init__(self) -> None:
        check_choice("isolation", self.isolation, ("full", "none"))
        check_positive("concurrency", self.concurrency)
        check_positive("wall_seconds", self.wall_seconds)
        check_positive("cpu_seconds", self.cpu_seconds)
        check_positive("memory_mb", self.memory_mb)


class SandboxExecutor:
    """Holds a Sandbox pool and executes a table's programs concurrently."""

    def __init__(self, params: SandboxParams) -> None:
        from operators.sandbox import Sandbox, SandboxLimits

        limits = SandboxLimits(
            wall_seconds=params.wall_seconds,
            cpu_seconds=params.cpu_seconds,
            memory_mb=params.memory_mb,
            max_processes=params.max_processes,
            max_output_bytes=params.max_output_bytes,
        )
        self.params = params
        self.sandbox = Sandbox(limits, concurrency=params.concurrency, isolation=params.isolation)

    def __call__(self, inputs: dict[str, pa.Table], ctx: NodeContext) -> pa.Table:
        from operators.sandbox import Job, TestSpec, extract_program

        table = inputs["rollouts"]
        tests = table[self.params.tests_column].to_pylist()
        jobs = [
            Job(extract_program(response or ""), TestSpec.parse(spec))
            for response, spec in zip(table["response"].to_pylist(), tests, strict=True)
        ]
        rows = [result.row() for result in self.sandbox.run_many(jobs)]
        for column in columns(*ExecResult.COLUMNS):
            values = [row[column.name] for row in rows]
            table = table.append_column(column.name, pa.array(values, column.type))
        return table

    def close(self) -> None:
        self.sandbox.close()


SANDBOX_PYTHON = OperatorDef(
    name="sandbox.python",
    kind=NodeKind.sandbox,
    factory=SandboxExecutor,
    ports=(Port("rollouts", columns("response")),),
    adds=columns(*ExecResult.COLUMNS),
    params=SandboxParams,
    stateful=True,
    streams=True,
    concurrency=lambda params: params.concurrency,
    description="Run each response's program with its tests in the isolated sandbox.",
)
