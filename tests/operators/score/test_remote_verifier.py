"""The `remote` score operator against a real HTTP verifier started by the test: batches,
the concurrency bound, a request that times out, HTTP 500, recovery, and on_error."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow as pa
import pytest

from operators.score.reward_function import OnError
from operators.score.reward_service.remote import RemoteParams, RemoteVerifier, parse_answer
from rldag.config.errors import InputError, RowError
from rldag.graph.operator import NodeContext


class Verifier:
    """A local verifier: scores 1.0 when response == ground_truth; `faults` lists what the
    next requests do ("slow": answer after `slow_s`, "500": fail) before it answers."""

    def __init__(self, faults: list[str] = (), slow_s: float = 1.0) -> None:
        self.faults, self.slow_s = list(faults), slow_s
        self.requests, self.tokens, self.in_flight, self.max_in_flight = [], [], 0, 0
        self.lock = threading.Lock()
        verifier = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with verifier.lock:
                    verifier.requests.append(body)
                    verifier.tokens.append(self.headers.get("Authorization"))
                    fault = verifier.faults.pop(0) if verifier.faults else "ok"
                    verifier.in_flight += 1
                    verifier.max_in_flight = max(verifier.max_in_flight, verifier.in_flight)
                try:
                    if fault == "slow":
                        time.sleep(verifier.slow_s)
                    time.sleep(0.05)  # so concurrent requests overlap
                    status, answer = (500, {"error": "boom"}) if fault == "500" else (200, None)
                    if answer is None:
                        answer = {
                            "scores": [
                                {"score": float(r["response"] == r["ground_truth"]), "by": "v"}
                                for r in body["rows"]
                            ]
                        }
                    data = json.dumps(answer).encode()
                finally:
                    # Done before the answer is written: once the client has it, it may send
                    # the next request, which must not find this one still counted.
                    with verifier.lock:
                        verifier.in_flight -= 1
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/verify"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def verifier():
    made = []

    def start(faults: list[str] = (), slow_s: float = 1.0) -> Verifier:
        made.append(Verifier(faults, slow_s))
        return made[-1]

    yield start
    for v in made:
        v.close()


def _rows(n: int) -> pa.Table:
    return pa.table(
        {
            "prompt_id": pa.array(range(n), pa.int64()),
            "prompt": [f"{i}+0=" for i in range(n)],
            "response": [str(i) if i % 3 else "x" for i in range(n)],
            "ground_truth": [str(i) for i in range(n)],
            "data_source": ["arithmetic"] * n,
        }
    )


def _score(url: str, table: pa.Table, **params: object) -> pa.Table:
    scorer = RemoteVerifier(RemoteParams(url=url, **params))
    try:
        return scorer({"rollouts": table}, NodeContext("verify", 0, 0, ""))
    finally:
        scorer.close()


def test_rows_go_in_batches_within_the_concurrency_bound(verifier):
    server = verifier()
    out = _score(server.url, _rows(20), batch_size=3, concurrency=2)
    assert [len(r["rows"]) for r in server.requests] == [3] * 6 + [2]
    assert server.max_in_flight == 2
    assert out["reward"].to_pylist() == [float(i % 3 != 0) for i in range(20)]
    assert json.loads(out["reward_info"][1].as_py()) == {"score": 1.0, "by": "v"}
    assert set(out["reward_attempts"].to_pylist()) == {1}
    assert set(out["reward_error"].to_pylist()) == {""}


def test_a_timeout_then_a_500_then_recovery(verifier):
    server = verifier(["slow", "500"], slow_s=1.0)
    start = time.monotonic()
    out = _score(server.url, _rows(4), batch_size=4, timeout_s=0.3, retries=3, backoff_s=0.1)
    waited = time.monotonic() - start
    assert len(server.requests) == 3  # timed out, 500, answered
    assert out["reward_attempts"].to_pylist() == [3] * 4
    assert out["reward"].to_pylist() == [0.0, 1.0, 1.0, 0.0]
    assert set(out["reward_error"].to_pylist()) == {""}
    assert waited >= 0.3 + 0.1 + 0.2  # the timeout, then backoff 0.1 and 0.2


@pytest.mark.parametrize("on_error", ["zero", "drop", "fail"])
def test_a_verifier_that_keeps_failing_goes_to_on_error(verifier, on_error):
    server = verifier(["500"] * 3)  # the first batch fails all 3 attempts; the second is fine
    table = _rows(4)
    params = {"batch_size": 2, "concurrency": 1, "retries": 2, "backoff_s": 0.0}
    if on_error == "fail":
        with pytest.raises(RowError) as info:
            _score(server.url, table, on_error=OnError(on_error), **params)
        assert "row 0 (prompt_id 0)" in str(info.value) and "HTTP 500" in str(info.value)
        assert "failed 3 time(s)" in str(info.value)
        return
    out = _score(server.url, table, on_error=OnError(on_error), **params)
    if on_error == "zero":
        assert out["reward"].to_pylist() == [0.0, 0.0, 1.0, 0.0]
        errors = out["reward_error"].to_pylist()
        assert errors[2:] == ["", ""] and all("HTTP 500" in e for e in errors[:2])
        assert out["reward_attempts"].to_pylist() == [3, 3, 1, 1]
    else:
        assert out["prompt_id"].to_pylist() == [2, 3]


def test_malformed_answers_are_error_rows():
    assert parse_answer({"scores": [1, 0]}, 2)[1].score == 0.0
    assert "1 scores for 2 rows" in parse_answer({"scores": [1]}, 2)[0].error
    assert "no 'scores' list" in parse_answer([1, 2], 2)[0].error
    assert "without 'score'" in parse_answer({"scores": [{"s": 1}]}, 1)[0].error
    assert "nan" in parse_answer({"scores": [float("nan")]}, 1)[0].error


def test_secret_headers_come_from_the_environment(verifier, monkeypatch):
    server = verifier()
    monkeypatch.setenv("VERIFIER_TOKEN", "Bearer s3cret")
    _score(server.url, _rows(2), header_env={"Authorization": "VERIFIER_TOKEN"})
    assert server.tokens == ["Bearer s3cret"]
    monkeypatch.delenv("VERIFIER_TOKEN")
    with pytest.raises(InputError) as info:
        _score(server.url, _rows(2), header_env={"Authorization": "VERIFIER_TOKEN"})
    assert info.value.path == "header_env.Authorization" and "VERIFIER_TOKEN" in info.value.message
