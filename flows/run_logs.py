"""Operator logs in the Prefect UI: the `rldag` logger tree (operators log to `rldag.ops`)
gets Prefect's API log handler, so its records land in the task and flow run logs.

Equivalent to PREFECT_LOGGING_EXTRA_LOGGERS=rldag, but works in every process that runs the
flow (CLI, `serve`, a process worker) without depending on the environment.
"""

from __future__ import annotations

import logging

from prefect.context import FlowRunContext, TaskRunContext
from prefect.logging.handlers import APILogHandler

LOGGER = "rldag"


def forward_rldag_logs(level: int = logging.INFO) -> None:
    """Send `rldag` and `rldag.*` records at `level` and above to the Prefect API (once)."""
    logger = logging.getLogger(LOGGER)
    if logger.level == logging.NOTSET or logger.level > level:
        logger.setLevel(level)
    if not any(isinstance(h, APILogHandler) for h in logger.handlers):
        handler = APILogHandler()
        handler.addFilter(_inside_a_run)
        logger.addHandler(handler)


def _inside_a_run(record: logging.LogRecord) -> bool:
    """Only records logged within a flow or task run go to the API (operators also run
    outside Prefect: `rldag.engine.driver.run_inline`, benchmarks, tests)."""
    return FlowRunContext.get() is not None or TaskRunContext.get() is not None
