"""Fixtures for the sandbox tests: a shared sandbox with small limits, a one-slot sandbox and
a canary process (the host-side probes are in tests/support/sandbox.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from operators.sandbox import Sandbox
from tests.support.sandbox import LIMITS, marker


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    """A two-slot sandbox shared by the suite; fails (never skips) if a layer is missing."""
    with Sandbox(LIMITS, concurrency=2) as sb:
        yield sb


@pytest.fixture
def solo() -> Iterator[Sandbox]:
    """A one-slot sandbox, so consecutive runs share a zygote."""
    with Sandbox(LIMITS, concurrency=1) as sb:
        yield sb


@pytest.fixture
def canary() -> Iterator[subprocess.Popen]:
    """A host process that attacks must not be able to see or kill."""
    tag = marker()
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", tag],
        env={"CANARY_SECRET": tag},
    )
    proc.tag = tag  # type: ignore[attr-defined]
    yield proc
    proc.kill()
    proc.wait()
