"""Weight updates while requests decode: retracted sequences continue under the new weights
(prompt + partial output re-prefilled), keep their tokens, RNG position and log-probs, and
report the versions that generated them. The server runs in process (FastAPI TestClient)."""

from __future__ import annotations

import threading
import time

import pytest
from fastapi.testclient import TestClient

from operators.rollout import SamplingParams, TorchEngine
from operators.rollout.engine_loop import EngineLoop
from operators.rollout.guard import auth_headers
from operators.rollout.server import build_app
from operators.rollout.weight_update import record_version
from operators.rollout.weights import save_checkpoint
from tests.support.tiny_models import random_causal_lm

PROMPTS = [[1, 2, 3], [4, 5, 6, 7], [8, 9], [10, 11, 12, 13, 14]]
MAX_NEW = 64


@pytest.fixture
def served():
    """The engine loop and a TestClient over a server running a random tiny Qwen2 (seed 0)."""
    loop = EngineLoop(TorchEngine(random_causal_lm(0)))
    with TestClient(build_app(loop, "tiny", token="t"), headers=auth_headers("t")) as client:
        yield loop, client
    loop.close()


def _generate_in_background(client: TestClient, body: dict) -> tuple[threading.Thread, dict]:
    answer: dict = {}
    thread = threading.Thread(target=lambda: answer.update(out=client.post("/generate", json=body)))
    thread.start()
    return thread, answer


def _wait_until_decoding(loop: EngineLoop, tokens: int = 3, timeout_s: float = 30.0) -> None:
    """Return once some live sequence has sampled ``tokens`` tokens."""
    batcher = loop.engine.batcher
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if batcher.active and int(batcher.s.count[: batcher.hi].max()) >= tokens:
            return
        time.sleep(0.001)
    raise TimeoutError("the request never started decoding")


def _switch_index(meta: dict) -> int:
    """The index of the first token generated after the update (asserting there was one)."""
    starts = meta["weight_version_starts"]
    assert [version for _, version in starts] == ["0", "1"], starts
    assert meta["oldest_weight_version"] == "0" and meta["weight_version"] == "1"
    switch = starts[1][0]
    assert 0 < switch < MAX_NEW  # the update came while it was decoding
    return switch


def test_record_version_keeps_one_start_per_version_change() -> None:
    starts: list[tuple[int, str]] = []
    record_version(starts, 0, "0")
    record_version(starts, 4, "0")  # same version: nothing new
    assert starts == [(0, "0")]
    record_version(starts, 5, "1")
    assert starts == [(0, "0"), (5, "1")]
    record_version(starts, 5, "2")  # no token came from 1
    assert starts == [(0, "0"), (5, "2")]
    record_version(starts, 5, "0")  # back to 0 before any token of 2
    assert starts == [(0, "0")]


def test_update_mid_decoding_continues_every_request_under_the_new_weights(
    served, tmp_path
) -> None:
    loop, client = served
    path = save_checkpoint(random_causal_lm(5).state_dict(), tmp_path / "v1")
    params = {"max_new_tokens": MAX_NEW, "temperature": 0, "ignore_eos": True}
    body = {"input_ids": PROMPTS, "sampling_params": params, "return_logprob": True}
    thread, answer = _generate_in_background(client, body)
    _wait_until_decoding(loop)
    update = {"model_path": str(path), "weight_version": "1", "in_flight": "retract"}
    reply = client.post("/update_weights_from_disk", json=update).json()
    thread.join()
    assert reply["success"] and reply["num_paused_requests"] == 1
    outs = answer["out"].json()
    greedy = SamplingParams(temperature=0, max_new_tokens=MAX_NEW, ignore_eos=True)
    old = TorchEngine(random_causal_lm(0)).generate(PROMPTS, greedy)
    new = TorchEngine(random_causal_lm(5))
    for prompt, out, before in zip(PROMPTS, outs, old, strict=True):
        meta = out["meta_info"]
        assert meta["finish_reason"] == {"type": "length", "length": MAX_NEW}
        switch = _switch_index(meta)
        ids = out["output_ids"]
        lps = [t[0] for t in meta["output_token_logprobs"]]
        assert ids[:switch] == before[0].token_ids[:switch]  # kept, not regenerated
        assert lps[:switch] == pytest.approx(before[0].logprobs[:switch], abs=1e-5)
        rest = SamplingParams(temperature=0, max_new_tokens=MAX_NEW - switch, ignore_eos=True)
        (after,) = new.generate([prompt + ids[:switch]], rest)
        assert ids[switch:] == after[0].token_ids  # the new weights' continuation
        assert lps[switch:] == pytest.approx(after[0].logprobs, abs=1e-4)
        assert ids[switch:] != before[0].token_ids[switch:]  # and not the old weights'


def test_identical_weights_pushed_mid_flight_give_the_uninterrupted_samples(
    served, tmp_path
) -> None:
    """Through SGLang's pause(retract) -> update -> continue: every sequence re-prefills and
    its RNG stream goes on where it was, so sampling (temperature 1) is unchanged."""
    loop, client = served
    path = save_checkpoint(random_causal_lm(0).state_dict(), tmp_path / "same")
    params = {"max_new_tokens": MAX_NEW, "n": 3, "sampling_seed": 11, "ignore_eos": True}
    body = {"input_ids": PROMPTS, "sampling_params": params, "return_logprob": True}
    thread, answer = _generate_in_background(client, body)
    _wait_until_decoding(loop)
    assert client.post("/pause_generation", json={"mode": "retract"}).status_code == 200
    update = {"model_path": str(path), "weight_version": "1"}
    reply = client.post("/update_weights_from_disk", json=update).json()
    assert reply["success"]
    assert client.post("/continue_generation").status_code == 200
    thread.join()
    outs = answer["out"].json()
    sampled = SamplingParams(n=3, max_new_tokens=MAX_NEW, seed=11, ignore_eos=True)
    local = TorchEngine(random_causal_lm(0)).generate(PROMPTS, sampled)
    uninterrupted = [c for group in local for c in group]
    assert len(outs) == len(uninterrupted) == 3 * len(PROMPTS)
    for out, c in zip(outs, uninterrupted, strict=True):
        _switch_index(out["meta_info"])
        assert out["output_ids"] == c.token_ids
        lps = [t[0] for t in out["meta_info"]["output_token_logprobs"]]
        assert lps == pytest.approx(c.logprobs, abs=1e-4)


def test_update_while_paused_in_place_waits_for_nothing_and_keeps_the_caches(
    served, tmp_path
) -> None:
    """SGLang's in_place pause: the update loads at once; decoding then goes on from the old
    caches (not re-prefilled), still recording the version change."""
    loop, client = served
    path = save_checkpoint(random_causal_lm(5).state_dict(), tmp_path / "v1")
    params = {"max_new_tokens": MAX_NEW, "temperature": 0, "ignore_eos": True}
    body = {"input_ids": PROMPTS[0], "sampling_params": params}
    thread, answer = _generate_in_background(client, body)
    _wait_until_decoding(loop)
    assert client.post("/pause_generation", json={"mode": "in_place"}).status_code == 200
    update = {"model_path": str(path), "weight_version": "1"}
    assert client.post("/update_weights_from_disk", json=update).json()["success"]
    assert thread.is_alive()  # the update did not finish the paused request
    assert client.post("/continue_generation").status_code == 200
    thread.join()
    out = answer["out"].json()
    switch = _switch_index(out["meta_info"])
    ids = out["output_ids"]
    rest = SamplingParams(temperature=0, max_new_tokens=MAX_NEW - switch, ignore_eos=True)
    (refilled,) = TorchEngine(random_causal_lm(5)).generate([PROMPTS[0] + ids[:switch]], rest)
    assert ids[switch:] != refilled[0].token_ids


def test_samples_admitted_after_an_update_are_prefilled_under_the_new_weights() -> None:
    """A group whose samples wait for slots keeps its prompt's cache; an update drops it."""
    engine = TorchEngine(random_causal_lm(0), max_batch_size=2)
    batcher = engine.batcher
    batcher.weight_version = "0"
    params = SamplingParams(n=4, max_new_tokens=8, seed=3, ignore_eos=True)
    ticket = batcher.submit([1, 2, 3], params, seed=3, index=0, stop_ids=[])
    batcher.step()
    batcher.step()  # samples 0 and 1 decode; 2 and 3 wait with the prompt prefilled
    engine.load_state_dict(random_causal_lm(5).state_dict())
    batcher.new_weights("1")
    assert batcher.refresh() == 2
    done = {}
    while batcher.has_work:
        done.update(batcher.step())
    samples = done[ticket]
    fresh = TorchEngine(random_causal_lm(5)).generate([[1, 2, 3]], params)[0]
    assert [c.versions for c in samples] == [((0, "0"), (3, "1"))] * 2 + [((0, "1"),)] * 2
    assert [c.token_ids for c in samples[2:]] == [c.token_ids for c in fresh[2:]]


def test_update_rejects_an_unknown_or_contradictory_in_flight_mode(served, tmp_path) -> None:
    _, client = served
    path = str(save_checkpoint(random_causal_lm(0).state_dict(), tmp_path / "v"))
    bad = client.post("/update_weights_from_disk", json={"model_path": path, "in_flight": "wait"})
    assert bad.status_code == 400
    assert "in_flight must be one of finish, abort, retract" in bad.json()["message"]
    both = {"model_path": path, "in_flight": "retract", "abort_all_requests": True}
    clash = client.post("/update_weights_from_disk", json=both)
    assert clash.status_code == 400 and clash.json()["success"] is False
