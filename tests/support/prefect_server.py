"""A real `prefect server start` on a free loopback port, SQLite under its own PREFECT_HOME,
for tests and benchmarks; stopped (its whole process group) on exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from flows.embedded_server import free_port
from flows.settings import SERVER_DEFAULTS

BIN = Path(sys.executable).parent


class PrefectServer:
    """Context manager: start the server, wait until healthy, stop it on exit."""

    def __init__(self, home: Path, port: int | None = None, startup_s: float = 120) -> None:
        self.home = home
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api = f"{self.url}/api"
        self.startup_s = startup_s
        self.process: subprocess.Popen | None = None

    def env(self) -> dict[str, str]:
        """The environment of a client process (CLI, worker, serve) that uses this server."""
        env = {**os.environ, **SERVER_DEFAULTS}
        env |= {"PREFECT_HOME": str(self.home), "PREFECT_API_URL": self.api}
        return env

    def __enter__(self) -> PrefectServer:
        self.home.mkdir(parents=True, exist_ok=True)
        env = self.env() | {"PREFECT_UI_API_URL": self.api}  # the UI asks this API
        env.pop("PREFECT_API_URL")
        command = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1"]
        log = open(self.home / "server.log", "wb")  # noqa: SIM115 (kept open while it runs)
        self.process = subprocess.Popen(
            [*command, "--port", str(self.port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.startup_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"prefect server exited: {(self.home / 'server.log').read_text()}"
                )
            try:
                if httpx.get(f"{self.api}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.__exit__()
        raise RuntimeError(f"prefect server not healthy after {self.startup_s} s")

    def __exit__(self, *exc: object) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
