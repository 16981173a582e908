"""`remote` score operator: rows go to an HTTP verifier in batches.

Each request is ``POST url`` with ``{"rows": [{column: value, ...}, ...]}`` (the node's
`columns` of each row); the verifier answers ``{"scores": [...]}``, one entry per row, each
a number or a dict with a numeric ``score`` (the rest is kept as `reward_info`), exactly what
a reward function may return. At most `concurrency` requests are in flight; a request that
times out, cannot connect or gets HTTP 429/5xx is sent again after `backoff_s` × 2^k (k = 0,
1, ...), up to `retries` times. When a batch still fails, or its answer is malformed, its
rows are error rows for the node's `on_error`; every row records in `reward_attempts` how
many requests its batch took.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
import pyarrow as pa
from omegaconf import MISSING

from operators.score.reward_call import RewardOutcome, judge
from operators.score.reward_function import OnError, scored_table
from rldag import InputError, NodeContext, NodeKind, OperatorDef, Port, check_positive, col, columns

RETRIED_STATUS = frozenset({408, 429, 500, 502, 503, 504})


@dataclass
class RemoteParams:
    """Parameters of the `remote` score operator."""

    url: str = MISSING  # the verifier's endpoint (POST)
    columns: list[str] = field(
        default_factory=lambda: ["prompt", "response", "ground_truth", "data_source"]
    )  # what each row sends
    batch_size: int = 32  # rows per request
    concurrency: int = 4  # requests in flight at once
    timeout_s: float = 30.0  # per request
    retries: int = 3  # more attempts after the first (timeouts, connection errors, 429, 5xx)
    backoff_s: float = 0.5  # wait before retry k: backoff_s * 2**k
    headers: dict[str, str] = field(default_factory=dict)  # sent with every request
    header_env: dict[str, str] = field(default_factory=dict)  # header -> environment variable
    # holding its value: secrets (the resolved pipeline, headers included, is stored)
    on_error: OnError = OnError.fail  # fail | zero | drop

    def __post_init__(self) -> None:
        for key in ("batch_size", "concurrency", "timeout_s"):
            check_positive(key, getattr(self, key))
        check_positive("retries", self.retries, allow_zero=True)
        check_positive("backoff_s", self.backoff_s, allow_zero=True)


def parse_answer(body: object, rows: int) -> list[RewardOutcome]:
    """Outcomes of one batch from the verifier's JSON answer (all errors if it is malformed)."""
    scores = body.get("scores") if isinstance(body, dict) else None
    if not isinstance(scores, list) or len(scores) != rows:
        got = f"{len(scores)} scores" if isinstance(scores, list) else "no 'scores' list"
        return [RewardOutcome(error=f"answered {got} for {rows} rows")] * rows
    return [judge(s) for s in scores]


def check_columns(params: RemoteParams, inputs: Mapping[str, pa.Schema]) -> None:
    """Every column a request sends must be in the node's input."""
    schema = inputs["rollouts"]
    for name in params.columns:
        if name not in schema.names:
            raise InputError(
                f"column '{name}' is not in the input (columns: {', '.join(schema.names)})",
                path="columns",
            )


class RemoteVerifier:
    """Scores rows through an HTTP verifier; adds `reward`, `reward_info`, `reward_error`,
    `reward_attempts`."""

    def __init__(self, params: RemoteParams) -> None:
        self.p = params
        headers = dict(params.headers)
        for header, variable in params.header_env.items():
            if variable not in os.environ:
                raise InputError(
                    f"environment variable {variable} (header {header}) is not set",
                    path=f"header_env.{header}",
                )
            headers[header] = os.environ[variable]
        self.client = httpx.Client(timeout=params.timeout_s, headers=headers)
        self.pool = ThreadPoolExecutor(params.concurrency, thread_name_prefix="rldag-remote")

    def _attempt(self, payload: dict, rows: int) -> tuple[list[RewardOutcome] | None, str]:
        """(outcomes, "") when the verifier answered, else (None, why the attempt failed)."""
        try:
            response = self.client.post(self.p.url, json=payload)
        except httpx.TimeoutException:
            return None, f"timed out after {self.p.timeout_s:g} s"
        except httpx.TransportError as err:
            return None, f"could not reach it ({type(err).__name__}: {err})"
        if response.status_code in RETRIED_STATUS:
            return None, f"HTTP {response.status_code}"
        if response.status_code >= 400:
            return [
                RewardOutcome(error=f"HTTP {response.status_code}: {response.text[:200]}")
            ] * rows, ""
        try:
            return parse_answer(response.json(), rows), ""
        except ValueError:
            return [RewardOutcome(error=f"answered non-JSON: {response.text[:200]!r}")] * rows, ""

    def _batch(self, payload: dict, rows: int) -> tuple[list[RewardOutcome], int]:
        """The batch's outcomes and the requests it took."""
        for attempt in range(self.p.retries + 1):
            if attempt:
                time.sleep(self.p.backoff_s * 2 ** (attempt - 1))
            outcomes, why = self._attempt(payload, rows)
            if outcomes is not None:
                return outcomes, attempt + 1
        tries = self.p.retries + 1
        error = f"verifier {self.p.url} failed {tries} time(s), last: {why}"
        return [RewardOutcome(error=error)] * rows, tries

    def __call__(self, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> pa.Table:
        table = inputs["rollouts"]
        records = table.select(self.p.columns).to_pylist()
        size = self.p.batch_size
        batches = [records[i : i + size] for i in range(0, len(records), size)]
        done = list(self.pool.map(lambda b: self._batch({"rows": b}, len(b)), batches))
        outcomes = [o for batch, _ in done for o in batch]
        attempts = [n for batch, n in done for _ in batch]
        table = table.append_column("reward_attempts", pa.array(attempts, pa.int32()))
        return scored_table(table, outcomes, self.p.on_error, ctx, f"remote verifier {self.p.url}")

    def close(self) -> None:
        """Stop the request threads and close the connections."""
        self.pool.shutdown(wait=True)
        self.client.close()


REMOTE = OperatorDef(
    name="remote",
    kind=NodeKind.score,
    factory=RemoteVerifier,
    ports=(Port("rollouts", columns("response")),),
    adds=(
        col("reward"),
        col("reward_info"),
        col("reward_error", pa.string()),
        col("reward_attempts", pa.int32()),
    ),
    params=RemoteParams,
    check_input=check_columns,
    concurrency=lambda params: params.concurrency,  # bounded by its pool's max_concurrency
    stateful=True,
    streams=True,
    description="An HTTP verifier scores rows in batches (retries, timeout, on_error).",
)
