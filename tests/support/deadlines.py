"""Deadlines measured by the fault-injection suite (tests/e2e/test_deadlines.py): `within`
times a wait that a fault broke, fails the test past its bound, and records the case; the
session ends with a table of every case, its bound and the seconds it took (a pytest plugin,
loaded by tests/conftest.py; under xdist the records travel with the test reports)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

KEY = "deadline"  # the user property a measured case is recorded under
_measured: list[tuple[str, float, float]] = []  # (case, bound s, measured s), this session


def record(request: pytest.FixtureRequest, case: str, bound_s: float, seconds: float) -> None:
    """Record a case measured elsewhere (in another process, from another thread's start) and
    fail the test past its bound."""
    request.node.user_properties.append((KEY, (case, bound_s, seconds)))
    assert seconds <= bound_s, f"{case}: {seconds:.1f} s, past its bound of {bound_s:g} s"


@contextmanager
def within(request: pytest.FixtureRequest, case: str, bound_s: float) -> Iterator[None]:
    """Time the block (which must end, by its error or its result, in `bound_s`)."""
    start = time.monotonic()
    yield
    record(request, case, bound_s, time.monotonic() - start)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        _measured.extend(value for key, value in report.user_properties if key == KEY)


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 (pytest's type)
    if not _measured:
        return
    terminalreporter.section("deadlines: each fault, its bound and the seconds it took")
    width = max(len(case) for case, _, _ in _measured)
    terminalreporter.write_line(f"{'case':<{width}}  bound s  measured s")
    for case, bound_s, seconds in _measured:
        terminalreporter.write_line(f"{case:<{width}}  {bound_s:7.1f}  {seconds:10.2f}")
