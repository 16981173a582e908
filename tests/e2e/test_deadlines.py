"""Every wait has a deadline: the real components, broken one at a time while something waits
on them, and each wait ends within its bound (set small through its setting) in progress or
in a typed error naming the component; the stored data and the process table are checked
too. The session ends with a table of each case's bound and measured seconds
(tests/support/deadlines.py); the waits and their settings: docs/operations/faults.md."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import psutil
import pyarrow as pa
import pytest

from tests.support.deadlines import record, within
from tests.support.s3 import CREDENTIALS

TIMEOUT_S = 2.0  # every deadline under test
SLACK_S = 1.5  # scheduling on 2 busy cores


def _stopped(pid: int) -> bool:
    return psutil.Process(pid).status() == psutil.STATUS_STOPPED


def test_an_s3_endpoint_that_never_answers_fails_reads_and_writes_naming_the_object(
    request, monkeypatch
):
    """A real S3-protocol server behind a proxy that goes silent (connections accepted, no
    byte back): a read and a write each end within 3 attempts of faults.storage_timeout_s
    and their backoff with an OSError naming the object, the calls right after it at once;
    the failed PUT left no object."""
    from moto.server import ThreadedMotoServer

    from rldag.storage.store import S3_ATTEMPTS, S3_BACKOFF_S, Storage
    from tests.support.black_hole import BlackHoleProxy

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    proxy = BlackHoleProxy((host, port))
    try:
        store = Storage("s3://hole/runs", endpoint_url=proxy.url, timeout_s=0.5)
        store.fs.mkdir("hole")
        table = pa.table({"x": list(range(100))})
        store.write_table("run/iter=0/a.parquet", table)
        proxy.silence()
        bound = S3_ATTEMPTS * 0.5 + S3_BACKOFF_S + SLACK_S  # a write's deadline has its bytes
        with (
            within(request, "S3 endpoint silent: a read", bound),
            pytest.raises(OSError, match=r"cannot read s3://hole/runs/run/iter=0/a\.parquet"),
        ):
            store.read_table("run/iter=0/a.parquet")
        writer = Storage("s3://hole/runs", endpoint_url=proxy.url, timeout_s=0.5)
        with (
            within(request, "S3 endpoint silent: a write", bound),
            pytest.raises(OSError, match=r"cannot write s3://hole/runs/run/iter=1/a\.parquet"),
        ):
            writer.write_table("run/iter=1/a.parquet", table)
        with (
            within(request, "S3 endpoint silent: the next write", SLACK_S),
            pytest.raises(OSError, match="not tried, the endpoint did not answer"),
        ):
            writer.write_table("run/iter=1/b.parquet", table)
        direct = f"http://{host}:{port}"  # the server itself, not the silent proxy
        behind = Storage("s3://hole/runs", endpoint_url=direct, skip_instance_cache=True)
        assert behind.list("run") == ["iter=0"]  # the failed PUT left nothing
        assert behind.read_table("run/iter=0/a.parquet").equals(table)  # and tore nothing
    finally:
        proxy.close()
        server.stop()


@pytest.fixture
def one_server(tiny_task, tmp_path):
    """One real rollout server (its own process), killed at the end."""
    from operators.rollout.guard import new_token
    from operators.rollout.launch import start_local_servers

    token = new_token()
    (server,) = start_local_servers(
        str(tiny_task / "model"), 1, token=token, weights_root=tmp_path, log_dir=tmp_path
    )
    yield server, token
    server.kill()  # a stopped process takes SIGKILL


def test_a_rollout_server_that_stops_answering_mid_generation_is_named(request, one_server):
    """SIGSTOP of the only rollout server while it generates: every request in flight ends
    after request_timeout_s, its /health after 2 s, and the client raises NoServerError
    naming the server; the server is left as it was (stopped, not killed)."""
    from operators.rollout import SamplingParams
    from operators.rollout.client import HEALTH_TIMEOUT_S, NoServerError, RolloutClient

    server, token = one_server
    client = RolloutClient([server.url], timeout_s=TIMEOUT_S, token=token)
    prompts = [[5 + i % 10, 12, 5 + i // 10 % 10, 13] for i in range(8)]
    params = SamplingParams(n=4, max_new_tokens=4000, ignore_eos=True)
    stopped: dict[str, float] = {}

    def stop_when_busy() -> None:
        deadline = time.monotonic() + 60
        while client.outstanding()[server.url] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # decoding
        os.kill(server.process.pid, signal.SIGSTOP)
        stopped["at"] = time.monotonic()

    stopper = threading.Thread(target=stop_when_busy)
    stopper.start()
    try:
        with pytest.raises(NoServerError) as err:
            client.generate(prompts, params, list(range(len(prompts))))
    finally:
        stopper.join()
        client.close()
    bound = TIMEOUT_S + HEALTH_TIMEOUT_S + SLACK_S
    record(request, "rollout server stopped", bound, time.monotonic() - stopped["at"])
    assert f"{server.url} stopped answering (ReadTimeout after 2 s)" in str(err.value)
    assert _stopped(server.process.pid)  # the client never kills a server
    assert not [t for t in threading.enumerate() if t.name.startswith("rollout-client")]


def test_an_environment_actor_that_hangs_times_out_its_call_and_serves_others(request, ray_local):
    """An environment actor whose step hangs: the call ends after step_timeout_s with
    CallTimeout (the agent loop ends that episode, never the run); the same actor still
    serves another episode at once; shutdown takes the actor's process away."""
    from ray.util.placement_group import placement_group, remove_placement_group

    from operators.generate.agent.deadline import CallTimeout
    from operators.generate.agent.environment import AssistantTurn
    from operators.generate.agent.hosting import RayHosts
    from operators.generate.agent.params import AgentParams
    from rldag.graph.operator import PoolReservation

    pg = placement_group([{"CPU": 1}])
    ray_local.get(pg.ready(), timeout=60)
    params = AgentParams(
        model_path="unused",
        environment="tests.support.agent_envs:BrokenEnv",
        env_params={"mode": "hang"},
        tool_parser="none",
    )
    hosts = RayHosts(params, PoolReservation("environment", pg, 1, 1.0, 0))
    try:
        (actor,) = hosts.actors
        pid = ray_local.get(actor.__ray_call__.remote(lambda _: os.getpid()))
        hosts.open("stuck", {"prompt_id": 0}, TIMEOUT_S)
        hosts.open("fine", {"prompt_id": 1, "mode": "echo"}, TIMEOUT_S)
        with (
            within(request, "environment actor hangs: a step", TIMEOUT_S + SLACK_S),
            pytest.raises(CallTimeout, match="no answer within 2s"),
        ):
            hosts.step("stuck", AssistantTurn("4"), TIMEOUT_S)
        with within(request, "environment actor hangs: another episode", SLACK_S):
            reply = hosts.step("fine", AssistantTurn("4"), TIMEOUT_S)
        assert not reply.done  # answered beside the hung call
        assert psutil.pid_exists(pid)
    finally:
        hosts.shutdown()
        remove_placement_group(pg)
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _weight_member(rank: int, port_file: str, out: str) -> None:
    """A member of a 2-process gloo weight group: both take one sync; then rank 1 dies and
    rank 0 times its next send."""
    import torch

    from rldag.compute.weights.broadcast import WeightGroup

    torch.set_num_threads(1)
    weights = {"w": torch.arange(1024, dtype=torch.float32)}
    if rank == 0:
        store, port = WeightGroup.open_store("127.0.0.1", TIMEOUT_S)
        Path(port_file).write_text(str(port))
        group = WeightGroup.join("127.0.0.1", port, 0, 2, "gloo", TIMEOUT_S, store, False)
        group.send(weights, 1 << 20)
        start = time.monotonic()
        try:
            group.send(weights, 1 << 20)
            error = ""
        except Exception as err:  # gloo's RuntimeError (a closed peer, or its timeout)
            error = repr(err)
        Path(out).write_text(json.dumps({"error": error, "seconds": time.monotonic() - start}))
        return
    while not Path(port_file).is_file() or not Path(port_file).read_text():
        time.sleep(0.02)
    port = int(Path(port_file).read_text())
    group = WeightGroup.join("127.0.0.1", port, 1, 2, "gloo", TIMEOUT_S, None, False)
    group.receive(lambda got: None)
    os._exit(3)  # dies as a killed rollout worker does: no goodbye


def test_a_broadcast_peer_that_dies_fails_the_senders_sync_within_its_timeout(request, tmp_path):
    """A receiver of the weight broadcast group dies after a sync: the sender's next sync
    raises within weights.timeout_s, and both processes are gone."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    port_file, out = str(tmp_path / "port"), str(tmp_path / "out.json")
    members = [ctx.Process(target=_weight_member, args=(r, port_file, out)) for r in (0, 1)]
    for member in members:
        member.start()
    for member in members:
        member.join(timeout=60)
    assert [m.exitcode for m in members] == [0, 3]  # the sender lived; the peer died
    assert not any(psutil.pid_exists(m.pid) for m in members)
    result = json.loads(Path(out).read_text())
    assert result["error"]
    record(request, "broadcast peer dies", TIMEOUT_S + SLACK_S, result["seconds"])


def test_a_prefect_api_that_stops_answering_is_named_within_its_bounds(request, prefect_api):
    """SIGSTOP of the Prefect server: a request of Prefect's client ends after
    faults.prefect_request_timeout_s (here without Prefect's retries) as an outage naming the
    server, the run's wait for it ends after faults.prefect_outage_s, and once the server
    runs again it answers."""
    from prefect.client.orchestration import get_client
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import (
        PREFECT_API_REQUEST_TIMEOUT,
        PREFECT_CLIENT_MAX_RETRIES,
        temporary_settings,
    )

    from flows.api_outage import POLL_S, api_url, outage_message, unreachable, wait_for_api

    pid = SubprocessASGIServer._instances[None].server_process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        settings = {PREFECT_API_REQUEST_TIMEOUT: TIMEOUT_S, PREFECT_CLIENT_MAX_RETRIES: 0}
        with (
            temporary_settings(updates=settings),
            within(request, "Prefect API stopped: a request", TIMEOUT_S + SLACK_S),
            pytest.raises(httpx.TimeoutException) as err,
            get_client(sync_client=True) as client,
        ):
            client.read_flow_runs(limit=1)
        assert unreachable(err.value) and api_url() in outage_message(err.value)
        bound = TIMEOUT_S + 2 * POLL_S + SLACK_S  # a /health poll in flight at the deadline
        with within(request, "Prefect API stopped: the run's wait", bound):
            assert not wait_for_api(time.monotonic() + TIMEOUT_S)
        assert _stopped(pid)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert wait_for_api(time.monotonic() + 30)  # the same server answers again
