"""The Prefect server `rldag run` starts when no PREFECT_API_URL is set keeps its SQLite
database where Prefect puts it, with Python's statement cache off (flows/settings.py), and is
restarted past its memory bound (flows/embedded_server.py); a server or database the user
configured stands."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from urllib.parse import urlsplit

import httpx
import psutil
import pytest
from prefect.settings import (
    PREFECT_API_URL,
    PREFECT_HOME,
    PREFECT_SERVER_DATABASE_CONNECTION_URL,
    temporary_settings,
)
from sqlalchemy.engine import make_url

from flows.settings import configure_embedded_server
from tests.support.paths import ROOT
from tests.support.pipelines import scoring_pipeline

KEY = "PREFECT_SERVER_DATABASE_CONNECTION_URL"


@pytest.fixture
def no_database_url(monkeypatch):
    """KEY absent now and again after the test, whatever the test set."""
    monkeypatch.setenv(KEY, "recorded")
    monkeypatch.delenv(KEY)


def test_the_embedded_server_gets_the_default_database_without_statement_cache(
    no_database_url, tmp_path
):
    # whatever the session set (the test harness's server and database), as a user's shell
    updates = {PREFECT_API_URL: None, PREFECT_HOME: tmp_path}
    defaults = {PREFECT_SERVER_DATABASE_CONNECTION_URL}
    with temporary_settings(updates=updates, restore_defaults=defaults):
        configure_embedded_server()
    url = make_url(os.environ[KEY])
    assert url.database == f"{tmp_path}/prefect.db"
    # what SQLAlchemy passes to sqlite3.connect: the cache of prepared statements is off
    from sqlalchemy.dialects.sqlite.aiosqlite import SQLiteDialect_aiosqlite

    _, kwargs = SQLiteDialect_aiosqlite().create_connect_args(url)
    assert kwargs["cached_statements"] == 0


@pytest.mark.parametrize(
    "updates",
    [
        {PREFECT_API_URL: "http://127.0.0.1:4200/api"},  # a server of the user's
        {PREFECT_API_URL: None, PREFECT_SERVER_DATABASE_CONNECTION_URL: "sqlite+aiosqlite:///x"},
    ],
    ids=["api-url", "own-database"],
)
def test_a_configured_server_or_database_is_left_alone(no_database_url, tmp_path, updates):
    with temporary_settings(updates={PREFECT_HOME: tmp_path, **updates}):
        configure_embedded_server()
    assert KEY not in os.environ


@pytest.mark.slow
def test_rldag_run_on_the_embedded_server_records_in_prefect_home_and_recycles_it(
    write_yaml, dataset, tmp_path, read_run
):
    """With no API URL `rldag run` starts a Prefect server of its own on PREFECT_HOME's
    database; a `faults.prefect_server_max_rss_mb` below its size restarts it at every
    iteration's end but the last, and the database still holds the run, every iteration's
    subflow and every node's task run, completed, and the restarts in the run's logs."""
    home, runs, iterations = tmp_path / "home", tmp_path / "runs", 3
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(home)  # no API URL: `rldag run` starts the embedded server
    doc = scoring_pipeline(dataset, storage={"uri": str(runs)}, iterations=iterations)
    doc["faults"] = {"prefect_server_max_rss_mb": 1}
    result = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", str(write_yaml(doc))],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    (run_dir,) = runs.iterdir()
    assert read_run(run_dir).metric("iteration") == list(range(iterations))
    with contextlib.closing(sqlite3.connect(home / "prefect.db")) as db:
        flow_runs = db.execute("SELECT id, name, state_type FROM flow_run").fetchall()
        task_runs = db.execute("SELECT flow_run_id, state_type FROM task_run").fetchall()
        logs = [message for (message,) in db.execute("SELECT message FROM log")]
    subflows = {name: id_ for id_, name, _ in flow_runs if name.startswith("iteration-")}
    assert sorted(subflows) == [f"iteration-{i}" for i in range(iterations)]
    assert [state for _, _, state in flow_runs] == ["COMPLETED"] * (iterations + 1)
    for id_ in subflows.values():  # one task run per node, each completed
        assert [state for run, state in task_runs if run == id_] == ["COMPLETED"] * 4
    restarts = [m for m in logs if m.startswith("restarted the Prefect server rldag started")]
    assert len(restarts) == iterations - 1, restarts


START_AND_WAIT = """
import http.server, threading, time
from flows import embedded_server

class Decoy(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'"decoy"')

# another process's server takes the port rldag chose before rldag's server binds it
decoy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Decoy)
threading.Thread(target=decoy.serve_forever, daemon=True).start()
embedded_server.free_port = lambda: decoy.server_port
url = embedded_server.start_embedded_server()
print(embedded_server._server.server_process.pid, url, decoy.server_port, flush=True)
time.sleep(300)
"""


@pytest.mark.slow
def test_the_embedded_server_ends_with_the_process_that_started_it(tmp_path):
    """The server binds its port before it starts (one that another server took is not
    used: a run talking to that server instead of its own was a CI failure), and a
    SIGKILLed `rldag run` cannot stop its server: the kernel ends it (never left behind)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {"PREFECT_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    starter = subprocess.Popen(
        [sys.executable, "-c", START_AND_WAIT], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        pid, url, decoy_port = starter.stdout.readline().split()
        server = psutil.Process(int(pid))
        assert server.is_running()
        port = urlsplit(url).port
        assert port != int(decoy_port)
        assert httpx.get(f"{url}/health").json() is True  # Prefect's, not the decoy's
        assert port in {c.laddr.port for c in server.net_connections("tcp")}
        starter.kill()
        server.wait(timeout=30)  # psutil.TimeoutExpired if it lives on
        assert not server.is_running()
    finally:
        starter.kill()
        starter.wait()
