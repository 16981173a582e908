"""Rollout servers let no one in: without the run's bearer token every endpoint but the health
checks answers 401 and changes nothing; weights load only from under the weights directory;
bodies over the cap get 413. In process, then one real server process on loopback."""

from __future__ import annotations

import os

import psutil
import pytest
from fastapi.testclient import TestClient

from operators.rollout import SamplingParams, TorchEngine
from operators.rollout.engine_loop import EngineLoop
from operators.rollout.guard import auth_headers, new_token
from operators.rollout.launch import start_local_servers
from operators.rollout.server import build_app
from operators.rollout.weights import save_checkpoint
from tests.support.tiny_models import random_causal_lm

TOKEN = new_token()
GREEDY = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}
PROMPT = {"input_ids": [1, 2, 3], "sampling_params": GREEDY}


@pytest.fixture
def app(tmp_path):
    loop = EngineLoop(TorchEngine(random_causal_lm(0)))
    yield build_app(
        loop, "tiny", token=TOKEN, weights_root=tmp_path / "weights", max_body_bytes=4096
    )
    loop.close()


def _greedy(seed: int) -> list[int]:
    params = SamplingParams(temperature=0, max_new_tokens=6, ignore_eos=True)
    return TorchEngine(random_causal_lm(seed)).generate([[1, 2, 3]], params)[0][0].token_ids


@pytest.mark.parametrize("headers", [{}, auth_headers("wrong"), {"Authorization": TOKEN}])
def test_requests_without_the_token_get_401_and_change_nothing(app, tmp_path, headers):
    path = save_checkpoint(random_causal_lm(5).state_dict(), tmp_path / "weights" / "v1")
    with TestClient(app, headers=headers) as intruder:
        update = {"model_path": str(path), "weight_version": "7"}
        for method, url, body in [
            ("POST", "/update_weights_from_disk", update),
            ("POST", "/pause_generation", {"mode": "abort"}),
            ("POST", "/generate", PROMPT),
            ("GET", "/get_model_info", None),
            ("GET", "/get_weight_version", None),
        ]:
            answer = intruder.request(method, url, json=body)
            assert answer.status_code == 401, url
            assert answer.headers["www-authenticate"] == "Bearer"
        assert intruder.get("/health").status_code == 200  # liveness stays open
    with TestClient(app, headers=auth_headers(TOKEN)) as owner:
        assert owner.get("/get_weight_version").json() == {"weight_version": "0"}
        out = owner.post("/generate", json=PROMPT).json()  # not paused, old weights
        assert out["output_ids"] == _greedy(0) != _greedy(5)


def test_weights_load_only_from_under_the_weights_directory(app, tmp_path):
    outside = save_checkpoint(random_causal_lm(5).state_dict(), tmp_path / "elsewhere")
    (tmp_path / "weights").mkdir(exist_ok=True)
    (tmp_path / "weights" / "link").symlink_to(outside)
    with TestClient(app, headers=auth_headers(TOKEN)) as owner:
        for path in (outside, tmp_path / "weights" / ".." / "elsewhere", tmp_path / "weights/link"):
            answer = owner.post("/update_weights_from_disk", json={"model_path": str(path)})
            assert answer.status_code == 403 and answer.json()["success"] is False
            assert "outside the weights directory" in answer.json()["message"]
        assert owner.post("/generate", json=PROMPT).json()["output_ids"] == _greedy(0)
        inside = save_checkpoint(random_causal_lm(5).state_dict(), tmp_path / "weights" / "v1")
        answer = owner.post("/update_weights_from_disk", json={"model_path": str(inside)})
        assert answer.json()["success"]
        assert owner.post("/generate", json=PROMPT).json()["output_ids"] == _greedy(5)


def test_bodies_over_the_cap_get_413(app):
    big = {"input_ids": list(range(2000)), "sampling_params": GREEDY}
    with TestClient(app, headers=auth_headers(TOKEN)) as owner:
        assert owner.post("/generate", json=big).status_code == 413

        def chunks():  # no content-length: counted as it arrives
            yield b'{"input_ids": [' + b"1," * 3000
            yield b"1]}"

        assert owner.post("/generate", content=chunks()).status_code == 413
        assert owner.post("/generate", json=PROMPT).status_code == 200


@pytest.mark.slow
def test_a_server_process_listens_on_loopback_only_and_wants_the_token(tiny_task, tmp_path):
    import httpx

    (server,) = start_local_servers(
        str(tiny_task / "model"), 1, token=TOKEN, weights_root=tmp_path, log_dir=tmp_path
    )
    try:
        listening = [
            c.laddr for c in psutil.Process(server.process.pid).net_connections("inet")
            if c.status == psutil.CONN_LISTEN
        ]  # fmt: skip
        assert [addr.ip for addr in listening] == ["127.0.0.1"]
        assert httpx.post(f"{server.url}/generate", json=PROMPT).status_code == 401
        ok = httpx.post(f"{server.url}/generate", json=PROMPT, headers=auth_headers(TOKEN))
        assert ok.status_code == 200 and len(ok.json()["output_ids"]) == 6
        assert TOKEN not in " ".join(server.process.args)  # not on its command line
        assert os.environ.get("RLDAG_ROLLOUT_TOKEN") != TOKEN  # nor in ours
    finally:
        server.stop()
