"""Helpers the tests import: user code, pipelines, servers, models, data."""
