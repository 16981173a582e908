"""Operator logs reach the run logs from any process: a pool worker returns what its
operator logged to `rldag.*`, and the driver replays those records through its handlers."""

from __future__ import annotations

import logging

import pyarrow as pa

from rldag.compute.log_capture import replay
from rldag.compute.worker import PoolWorker
from rldag.config.spec import load_pipeline
from rldag.graph.dag import build_graph
from rldag.graph.operator import NodeContext
from tests.support.pipelines import scoring_pipeline


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_pool_worker_returns_what_its_operator_logged(write_yaml, dataset, monkeypatch, caplog):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):  # PoolWorker sets them; restore after
        monkeypatch.setenv(key, "0")
    graph = build_graph(load_pipeline(write_yaml(scoring_pipeline(dataset))))
    prompts = pa.table({"prompt_id": pa.array([0, 1, 2], pa.int64()), "ground_truth": ["0"] * 3})
    ctx = NodeContext("answer", 2, 0, "/tmp/run")
    with caplog.at_level(logging.INFO):
        *_, logs = PoolWorker("driver", 0, 1).run(
            graph.nodes["answer"], {"prompts": prompts}, ctx, None, None, None
        )
    assert [(r["name"], r["level"], r["msg"]) for r in logs] == [
        ("rldag.ops", logging.INFO, "answered 3 prompts of iteration 2")
    ]
    assert "answered" not in caplog.text  # kept for the driver, not printed by the worker
    assert logging.getLogger("rldag").propagate  # the logger is as it was


def test_replayed_records_reach_the_driver_handlers():
    keep, logger = _Keep(), logging.getLogger("rldag")
    logger.addHandler(keep)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        replay([{"name": "rldag.ops", "level": logging.WARNING, "msg": "slow", "created": 5.25}])
        replay([{"name": "rldag.ops", "level": logging.DEBUG, "msg": "hidden", "created": 6.0}])
    finally:
        logger.removeHandler(keep)
        logger.setLevel(level)
    (record,) = keep.records
    assert (record.name, record.levelno, record.getMessage()) == ("rldag.ops", 30, "slow")
    assert record.created == 5.25 and record.msecs == 250
