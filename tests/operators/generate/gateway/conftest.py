"""One real gateway (the tiny lookup model, an HTTP server on loopback) for these tests."""

from __future__ import annotations

import pytest

from tests.support.gateway import GatewayHarness, lookup_model


@pytest.fixture(scope="package")
def gateway():
    harness = GatewayHarness(lookup_model())
    yield harness
    harness.close()
