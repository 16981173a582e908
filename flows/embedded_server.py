"""The Prefect server `rldag run` starts for itself when no PREFECT_API_URL is set, recycled
when its memory grows past a bound.

Prefect would start the same server on first use (its "ephemeral" `SubprocessASGIServer`, on
the same database file). rldag starts it itself so that it knows the process, binds the port
before the server starts (uvicorn listens on that socket: `--fd`) and can restart it on the
same port: at the end of an iteration, once the server's resident memory passes
`faults.prefect_server_max_rss_mb` (it grows ~2.6 MB per 100 iterations with no cache of
rldag's behind it: docs/operations/soak.md), as Celery replaces a worker past
`worker_max_memory_per_child`. The run's clients keep the URL: connected ones retry through
the restart, a subflow that starts meanwhile waits for it (flows/api_outage.py). A server of
your own (PREFECT_API_URL) is never touched.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time

import psutil

from flows.settings import configure_embedded_server

log = logging.getLogger("rldag.prefect")
_server = None  # prefect.server.api.server.SubprocessASGIServer, once started
FACTORY = "flows.busy_retry:create_app"
EPHEMERAL_ENV = {
    "PREFECT_UI_ENABLED": "0",
    "PREFECT__SERVER_EPHEMERAL": "1",
    "PREFECT__SERVER_FINAL": "1",
}
DRAIN_S = 30  # how long the run's queued events and logs may take to reach the server
BATCH_MARGIN_S = 0.5  # past a log batch interval, for its request to complete
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent thread ends


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _bound_socket(port: int) -> socket.socket:
    """A socket bound to `port` on 127.0.0.1 (another free port if that one was taken), for
    the server to listen and accept on. Bound here, before the server starts: no other
    process can take the port while uvicorn imports (seconds, in which two runs starting at
    once could each get the other's server)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the last server's
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.bind(("127.0.0.1", 0))
    return sock


def start_embedded_server() -> str | None:
    """Start the server and point this process (and what it starts) at it; its API URL, or
    None where an API URL was set (then nothing starts)."""
    global _server
    from prefect.settings import get_current_settings

    if get_current_settings().api.url:
        return None
    configure_embedded_server()
    server = _server_class()(port=free_port())
    server.start()
    _point_at(server.api_url)
    _server = server
    return server.api_url


def _server_class() -> type:
    """Prefect's subprocess server (its ephemeral one: no UI, the settings of this process)
    running Prefect's app behind `flows.busy_retry.RetryBusy`."""
    import prefect
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import get_current_settings

    class Server(SubprocessASGIServer):
        def _run_uvicorn_command(self) -> subprocess.Popen:
            sock = _bound_socket(self.port)
            self.port, fd = sock.getsockname()[1], sock.fileno()
            app_dir = str(prefect.__module_path__.parent)
            args = ["--app-dir", app_dir, "--factory", FACTORY, "--fd", str(fd)]
            args += ["--log-level", "error", "--lifespan", "on"]
            env = {
                **os.environ,
                **EPHEMERAL_ENV,
                **get_current_settings().to_environment_variables(exclude_unset=True),
            }
            # its own process group: a Ctrl-C at the terminal (SIGINT to the foreground group)
            # reaches `rldag run`, which stops the run and then this server, not the server
            command = [sys.executable, "-m", "uvicorn", *args]
            with sock:  # the server's alone: a process forked from this one later must not
                # keep it listening (with no one to accept) past the server
                return subprocess.Popen(
                    command, env=env, pass_fds=(fd,), process_group=0, preexec_fn=_end_with_parent
                )

    return Server


def _end_with_parent() -> None:
    """In the server's process, before it runs uvicorn: on Linux, have the kernel send it
    SIGTERM when the thread that started it (`rldag run`'s main thread) ends, so that it
    never outlives `rldag run` however that ends (SIGKILL, Ray's core aborting the process
    when its GCS is gone), as Ray's own processes share their driver's fate."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _point_at(api_url: str) -> None:
    """Make `api_url` this process's Prefect API, in every thread, and its children's."""
    from prefect.context import refresh_global_settings_context

    os.environ["PREFECT_API_URL"] = api_url
    refresh_global_settings_context()


def server_rss_mb() -> float | None:
    """The embedded server's resident memory (MB); None when rldag started none."""
    process = _server.server_process if _server is not None else None
    if process is None:
        return None
    try:
        return psutil.Process(process.pid).memory_info().rss / 2**20
    except psutil.Error:  # it just ended; the next request finds out
        return None


def recycle_if_grown(max_rss_mb: float) -> bool:
    """Restart the embedded server on its port if its memory passed `max_rss_mb` (0: never).
    The log batch being gathered is sent first (one batch interval); the server's services
    flush as it stops, and the run's events client reconnects and sends again what the
    server had not confirmed. (Draining Prefect's log and event workers instead leaves each
    drained one alive in Prefect's loop thread: +1.8 MB in the driver per restart.)"""
    from prefect.settings import get_current_settings

    rss = server_rss_mb()
    if rss is None or not max_rss_mb or rss <= max_rss_mb:
        return False
    start = time.monotonic()
    time.sleep(get_current_settings().logging.to_api.batch_interval + BATCH_MARGIN_S)
    _server.stop()
    _server.start()
    if _server.api_url != os.environ["PREFECT_API_URL"]:  # its port was taken meanwhile
        _point_at(_server.api_url)
    log.warning(
        "restarted the Prefect server rldag started (%.0f MB > faults.prefect_server_max_rss_mb"
        " = %g) in %.1f s",
        rss,
        max_rss_mb,
        time.monotonic() - start,
    )
    return True


def stop_embedded_server() -> None:
    """Stop the server rldag started, if any, once the run's last events and logs reached it
    (at the end of `rldag run`)."""
    global _server
    if _server is not None:
        _drain_reports()
        _server.stop()
        _server = None


def _drain_reports() -> None:
    """Send the events and logs this process has queued for the Prefect API."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=DRAIN_S, at_exit=False)
    EventsWorker.drain_all(timeout=DRAIN_S, at_exit=False)
