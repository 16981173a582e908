"""Prefect settings that keep per-iteration orchestration cheap (measured in bench/).

- The task-run recorder of a Prefect server writes one task run per transaction by default;
  on SQLite that lock contention made each iteration subflow cost ~1-2 s. Batching it
  (these env defaults reach the embedded/ephemeral server, which starts as a subprocess of
  this process) brings a subflow to ~0.2 s. A user-run `prefect server start` should be
  started with the same variables (docs/guides/prefect.md, "Run with a Prefect server").
- The ephemeral server (a subprocess started on the first flow when no API URL is set) may
  take longer than Prefect's 20 s to come up on a busy laptop or CI machine; the run would
  then fail before it starts. It gets 120 s.
- The embedded server's SQLite connections keep Python's statement cache (128 prepared
  statements each, `sqlite3.connect(cached_statements=...)`). SQLAlchemy writes many distinct
  statements (a multi-row INSERT per batch size), and the memory SQLite holds for them grew
  without a plateau in bench/soak.py: 3 -> 13 MB in 100 iterations, most of the server's
  growth. `rldag run` turns that cache off for the server it starts (the same database file).
- A sync subflow joins its heartbeat thread, which sleeps in 1 s steps: iteration subflows
  run without heartbeats (the run's top-level flow keeps them for crash detection).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

SERVER_DEFAULTS = {
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "200",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_READ_BATCH_SIZE": "200",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": "5",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
}


def apply_server_defaults() -> None:
    """Set the server-side defaults in the environment unless the user set them."""
    for key, value in SERVER_DEFAULTS.items():
        os.environ.setdefault(key, value)


STATEMENT_CACHE_OFF = "cached_statements=0"


def configure_embedded_server() -> None:
    """Turn off the statement cache of the embedded Prefect server this process will start:
    only with no API URL and Prefect's default SQLite database (one a user chose stands)."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    url = settings.server.database.connection_url
    default = f"sqlite+aiosqlite:///{settings.home}/prefect.db"
    if settings.api.url or url is None or url.get_secret_value() != default:
        return
    os.environ["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = f"{default}?{STATEMENT_CACHE_OFF}"


@contextmanager
def without_heartbeats() -> Iterator[None]:
    """Run the enclosed (sub)flow calls without the heartbeat thread."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield
