"""The built-in ``python`` tool: runs the model's code in the isolated sandbox.

One ``Sandbox`` (operators/sandbox: bubblewrap, seccomp, Landlock, rlimits, no network) per
process, shared by every episode's tool calls and started on first use; its slots bound how
many programs run at once. The observation is the program's stdout, then its stderr and a
status line when it failed.
"""

from __future__ import annotations

import threading
from typing import Any

_LOCK = threading.Lock()
_SANDBOXES: dict[tuple[str, int, float], Any] = {}


def shared_sandbox(isolation: str, slots: int, wall_seconds: float) -> Any:
    """The process's sandbox for these settings (started once)."""
    from operators.sandbox import Sandbox, SandboxLimits

    key = (isolation, slots, wall_seconds)
    with _LOCK:
        if key not in _SANDBOXES:
            limits = SandboxLimits(wall_seconds=wall_seconds, cpu_seconds=wall_seconds)
            _SANDBOXES[key] = Sandbox(limits, concurrency=slots, isolation=isolation)
        return _SANDBOXES[key]


def close_sandboxes() -> None:
    """Stop every sandbox this process started."""
    with _LOCK:
        for sandbox in _SANDBOXES.values():
            sandbox.close()
        _SANDBOXES.clear()


class PythonTool:
    """``python(code)`` in the sandbox; bound to the sandbox settings it was built with."""

    def __init__(self, isolation: str = "full", slots: int = 2, wall_seconds: float = 5.0):
        self.settings = (isolation, slots, wall_seconds)

    def python(self, code: str) -> str:
        """Run a Python program in an isolated sandbox and return what it printed.

        Args:
            code: The complete program; print the values you need.
        """
        result = shared_sandbox(*self.settings).run(code)
        if result.exec_status == "ok":
            return result.stdout
        parts = [result.stdout, result.stderr, f"[{result.exec_status}, exit {result.exit_code}]"]
        return "\n".join(p for p in parts if p)
