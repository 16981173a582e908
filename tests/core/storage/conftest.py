"""Fixtures for the tests in this folder."""

from __future__ import annotations

from tests.support.s3 import endpoint  # noqa: F401  (a fixture)
