"""Operator logs across processes: a pool worker (a Ray actor) captures what operators log
to the `rldag` loggers during a call and returns the records; the driver replays them in the
calling task, where Prefect's API log handler attaches them to the node's task run."""

from __future__ import annotations

import logging
from types import TracebackType

LOGGER = "rldag"  # operators log to rldag.ops (NodeContext.log)


class CapturedLogs(logging.Handler):
    """Context manager: while open, `rldag.*` records at `level` and above are kept in
    `records` (plain dicts, cheap to send back) instead of being emitted in this process."""

    def __init__(self, level: int = logging.INFO) -> None:
        super().__init__(level)
        self.records: list[dict[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + logging.Formatter().formatException(record.exc_info)
        item = {"name": record.name, "level": record.levelno, "msg": message}
        self.records.append(item | {"created": record.created})

    def __enter__(self) -> CapturedLogs:
        logger = logging.getLogger(LOGGER)
        self._saved = (logger.level, logger.propagate)
        if logger.level == logging.NOTSET or logger.level > self.level:
            logger.setLevel(self.level)
        logger.propagate = False
        logger.addHandler(self)
        return self

    def __exit__(
        self, kind: type | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        logger = logging.getLogger(LOGGER)
        logger.removeHandler(self)
        logger.level, logger.propagate = self._saved


def replay(records: list[dict[str, object]]) -> None:
    """Emit records captured elsewhere through this process's loggers (and handlers)."""
    for item in records:
        logger = logging.getLogger(str(item["name"]))
        level = int(item["level"])  # type: ignore[arg-type]
        if not logger.isEnabledFor(level):
            continue
        record = logger.makeRecord(logger.name, level, "(pool worker)", 0, item["msg"], (), None)
        record.created = float(item["created"])  # type: ignore[arg-type]
        record.msecs = (record.created % 1) * 1000
        logger.handle(record)
