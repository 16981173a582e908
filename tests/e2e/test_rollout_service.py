"""Rollout servers as processes on 127.0.0.1: failover, a weight push that retracts requests in
flight, and a pipeline whose generate node uses two of them with a weight update between
iterations."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pyarrow as pa
import pytest
import torch

from operators.generate.single_turn import rollout_table
from operators.model.hf import load_causal_lm
from operators.rollout import SamplingParams, TorchEngine
from operators.rollout.client import RolloutClient
from operators.rollout.guard import new_token
from operators.rollout.launch import start_local_servers
from operators.rollout.service import RolloutService
from operators.rollout.weight_update import InFlight
from tests.support.paths import ROOT
from tests.support.runs import run_pipeline
from tests.support.tiny_models import random_causal_lm

TOKEN = new_token()


@pytest.fixture
def two_servers(tiny_task, tmp_path):
    servers = start_local_servers(
        str(tiny_task / "model"), 2, token=TOKEN, weights_root=tmp_path, log_dir=tmp_path / "logs"
    )
    yield servers
    for server in servers:
        server.stop()


def test_server_killed_mid_request_is_detected_and_its_groups_resent(two_servers, tiny_task):
    client = RolloutClient([s.url for s in two_servers], timeout_s=120, token=TOKEN)
    victim = two_servers[0]
    prompts = [[5 + (i % 10), 12, 5 + (i // 10 % 10), 13] for i in range(48)]  # "a+b=" ids
    params = SamplingParams(n=8, max_new_tokens=48, ignore_eos=True)
    seeds = list(range(len(prompts)))
    killed = {}

    def kill_when_busy() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and client.outstanding()[victim.url] == 0:
            time.sleep(0.01)
        killed["outstanding"] = client.outstanding()[victim.url]
        victim.kill()

    import threading

    killer = threading.Thread(target=kill_when_busy)
    killer.start()
    try:
        answers = client.generate(prompts, params, seeds)
    finally:
        killer.join()
        client.close()
    assert killed["outstanding"] > 0  # it died holding requests
    assert client.alive == [two_servers[1].url]
    assert len(answers) == len(prompts)
    assert all(len(c.token_ids) == 48 for completions, _ in answers for c in completions)
    # Re-sent groups are seeded, so they equal what any server (or a local engine) gives.
    engine = TorchEngine.from_pretrained(str(tiny_task / "model"))
    for i in (0, 1):
        local = engine.generate(
            [prompts[i]], SamplingParams(n=8, max_new_tokens=48, ignore_eos=True, seed=seeds[i])
        )
        assert [c.token_ids for c in answers[i][0]] == [c.token_ids for c in local[0]]
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{victim.url}/health", timeout=2)


def test_a_sessions_turns_stay_on_its_server_and_prefill_only_what_they_add(two_servers):
    """Multi-turn sessions (an agent's episodes): session b starts while a's first turn keeps
    server 0 busy, so b's is on server 1; b's second turn, sent when both are idle (the least
    busy server would be 0), goes to server 1 and reuses the cache of b's first turn: it
    reports as cached the prompt and reply before it, and samples what a request without a
    session samples. Once closed, the session's cache is gone."""
    client = RolloutClient(
        [s.url for s in two_servers], timeout_s=120, token=TOKEN, session_caches=True
    )
    long, short = (SamplingParams(max_new_tokens=m, ignore_eos=True) for m in (400, 8))
    first = [5, 12, 6, 13]
    with ThreadPoolExecutor(1) as pool:
        busy = pool.submit(client.turn, first, long, 0, "a")
        deadline = time.monotonic() + 30
        while client.outstanding()[two_servers[0].url] == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        (reply,), _ = client.turn(first, short, 1, "b")  # on server 1
        busy.result()
    second = [*first, *reply.token_ids, 12, 7, 13]
    (turn,), _ = client.turn(second, short, 2, "b")
    assert turn.cached_tokens == len(first) + len(reply.token_ids) - 1
    (((alone,), _),) = client.generate([second], short, [2])
    assert alone.cached_tokens == 0 and alone.token_ids == turn.token_ids
    assert alone.logprobs == pytest.approx(turn.logprobs, abs=1e-4)
    client.close_session("b")
    (again,), _ = client.turn(second, short, 2, "b")
    assert again.cached_tokens == 0


def test_push_retracting_requests_in_flight_gives_rows_both_versions(tmp_path):
    """Responses interrupted by a push finish under the new weights; the rollout table records
    the oldest version as policy_version and the newest as policy_version_max."""
    random_causal_lm(0).save_pretrained(tmp_path / "model")
    service = RolloutService(str(tmp_path / "model"), servers=1, weights_dir=str(tmp_path / "w"))
    prompts, max_new = [[1, 2, 3], [4, 5, 6, 7]], 1000  # long enough to be mid-flight
    params = SamplingParams(n=2, max_new_tokens=max_new, ignore_eos=True)
    answers: dict = {}
    worker = threading.Thread(
        target=lambda: answers.update(out=service.generate(prompts, params, [1, 2]))
    )
    try:
        worker.start()
        url = service.client.servers[0].url
        deadline = time.monotonic() + 30
        while service.client.outstanding()[url] < len(prompts) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # both groups decoding
        service.push(random_causal_lm(5).state_dict(), 1, in_flight=InFlight.retract)
        worker.join()
    finally:
        service.close()
    groups = [completions for completions, _ in answers["out"]]
    table = rollout_table(
        pa.table({"prompt_id": [0, 1]}), prompts, groups, [v for _, v in answers["out"]]
    )
    assert table["policy_version"].to_pylist() == [0] * 4
    assert table["policy_version_max"].to_pylist() == [1] * 4
    assert table["finish_reason"].to_pylist() == ["length"] * 4
    assert [len(ids) for ids in table["response_ids"].to_pylist()] == [max_new] * 4
    switches = [c.versions[1][0] for group in groups for c in group]
    assert all(0 < switch < max_new for switch in switches)


def test_pipeline_with_two_rollout_servers_and_weight_updates(tiny_task, tmp_path):
    weights_dir = tmp_path / "weights"
    run = run_pipeline(
        ROOT / "pipeline.yaml",
        "iterations=2",
        f"storage.uri={tmp_path}/runs",
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        "nodes.prompts.params.batch_size=8",
        "nodes.generate.params.n=4",
        "nodes.generate.params.engine=server",
        "nodes.generate.params.servers=2",
        f"nodes.generate.params.weights_dir={weights_dir}",
        "nodes.train.params.lr=0.01",
        iterations=2,
    )
    tables = [run.table("generate", i) for i in range(2)]
    assert [set(t["policy_version"].to_pylist()) for t in tables] == [{0}, {1}]
    for t in tables:  # no update came mid-flight: every row saw one version
        assert t["policy_version_max"].to_pylist() == t["policy_version"].to_pylist()
    assert all(t.num_rows == 32 for t in tables)
    # Iteration 1 was sampled from the trained weights the servers loaded from disk: its
    # logprobs match a teacher-forced pass of that checkpoint, and not of the initial model.
    trained = load_causal_lm(str(weights_dir / "policy-v1")).eval()
    initial = load_causal_lm(str(tiny_task / "model")).eval()
    rows = tables[1].slice(0, 8).to_pylist()
    worst_trained = worst_initial = 0.0
    for row in rows:
        ids = torch.tensor([row["prompt_ids"] + row["response_ids"]])
        start = len(row["prompt_ids"]) - 1
        target = torch.tensor(row["response_ids"])
        got = torch.tensor(row["response_logprobs"])
        for model, name in ((trained, "trained"), (initial, "initial")):
            with torch.no_grad():
                logits = model(ids).logits[0, start:-1].float()
            ref = torch.log_softmax(logits, -1).gather(-1, target[:, None]).squeeze(-1)
            diff = float((ref - got).abs().max())
            if name == "trained":
                worst_trained = max(worst_trained, diff)
            else:
                worst_initial = max(worst_initial, diff)
    assert worst_trained < 1e-4
    assert worst_initial > 1e-3
