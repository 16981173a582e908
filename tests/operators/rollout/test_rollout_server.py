"""The rollout server's SGLang-protocol endpoints, served in process (no sockets)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from operators.rollout import SamplingParams, TorchEngine
from operators.rollout.client import completion_from_sglang
from operators.rollout.engine_loop import EngineLoop
from operators.rollout.guard import auth_headers
from operators.rollout.server import build_app
from operators.rollout.weights import save_checkpoint
from tests.support.tiny_models import random_causal_lm


@pytest.fixture
def served(tmp_path):
    """A TestClient (with the server's token) over a server whose engine runs a random tiny
    Qwen2 (seed 0) and loads weights from under tmp_path."""
    loop = EngineLoop(TorchEngine(random_causal_lm(0)))
    app = build_app(loop, "tiny", token="t0ken", weights_root=tmp_path)
    with TestClient(app, headers=auth_headers("t0ken")) as client:
        yield client
    loop.close()


def test_generate_single_prompt_returns_one_sglang_dict(served) -> None:
    body = {
        "input_ids": [1, 2, 3],
        "sampling_params": {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True},
        "return_logprob": True,
    }
    out = served.post("/generate", json=body).json()
    assert set(out) == {"text", "output_ids", "meta_info"}
    meta = out["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 6}
    assert meta["prompt_tokens"] == 3 and meta["completion_tokens"] == 6
    assert meta["weight_version"] == "0"
    triples = meta["output_token_logprobs"]
    assert [t[1] for t in triples] == out["output_ids"] and all(t[2] is None for t in triples)
    greedy = TorchEngine(random_causal_lm(0)).generate(
        [[1, 2, 3]], SamplingParams(temperature=0, max_new_tokens=6, ignore_eos=True)
    )
    assert out["output_ids"] == greedy[0][0].token_ids


def test_generate_batch_with_n_is_prompt_major_list(served) -> None:
    body = {
        "input_ids": [[1, 2, 3], [4, 5]],
        "sampling_params": {"max_new_tokens": 4, "n": 3, "sampling_seed": 9},
        "return_logprob": True,
    }
    outs = served.post("/generate", json=body).json()
    assert isinstance(outs, list) and len(outs) == 6
    assert [o["meta_info"]["prompt_tokens"] for o in outs] == [3, 3, 3, 2, 2, 2]
    params = SamplingParams(n=3, max_new_tokens=4, seed=9)
    local = TorchEngine(random_causal_lm(0)).generate([[1, 2, 3], [4, 5]], params)
    assert [o["output_ids"] for o in outs] == [c.token_ids for g in local for c in g]
    assert completion_from_sglang(outs[0]).logprobs == pytest.approx(local[0][0].logprobs)


def test_stop_token_reports_matched_id(served) -> None:
    first = served.post(
        "/generate",
        json={"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 8, "temperature": 0}},
    ).json()
    stop = first["output_ids"][2]
    cut = first["output_ids"].index(stop) + 1
    body = {
        "input_ids": [1, 2, 3],
        "sampling_params": {"max_new_tokens": 8, "temperature": 0, "stop_token_ids": [stop]},
    }
    out = served.post("/generate", json=body).json()
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert out["output_ids"] == first["output_ids"][:cut]


def test_update_weights_from_disk_switches_model_and_version(served, tmp_path) -> None:
    other = random_causal_lm(5)
    path = save_checkpoint(other.state_dict(), tmp_path / "v1")
    answer = served.post(
        "/update_weights_from_disk", json={"model_path": str(path), "weight_version": "1"}
    ).json()
    assert answer["success"] and answer["num_paused_requests"] == 0
    body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 6, "temperature": 0}}
    out = served.post("/generate", json=body).json()
    assert out["meta_info"]["weight_version"] == "1"
    expected = TorchEngine(random_causal_lm(5)).generate(
        [[1, 2, 3]], SamplingParams(temperature=0, max_new_tokens=6)
    )
    assert out["output_ids"] == expected[0][0].token_ids
    assert served.get("/get_weight_version").json() == {"weight_version": "1"}
    bad = served.post("/update_weights_from_disk", json={"model_path": str(tmp_path / "none")})
    assert bad.status_code == 400 and bad.json()["success"] is False


def test_control_endpoints(served) -> None:
    assert served.get("/health").status_code == 200
    assert served.post("/flush_cache").text.startswith("Cache flushed.")
    paused = served.post("/pause_generation", json={"mode": "in_place"}).json()
    assert paused == {"message": "Generation paused successfully.", "status": "ok"}
    resumed = served.post("/continue_generation").json()
    assert resumed == {"message": "Generation continued successfully.", "status": "ok"}
    info = served.get("/get_model_info").json()
    assert info["is_generation"] is True and info["weight_version"] == "0"
    assert served.post("/generate", json={"input_ids": [1], "stream": True}).status_code == 400
