"""Starting rollout servers as local processes: rldag's own, or real SGLang ones.

``start_local_servers`` runs ``python -m operators.rollout.server`` N times on 127.0.0.1 (each
picks a free port and reports it through a file), waits until every ``/health`` answers, and
returns handles that stop (or kill) them. Each server gets the run's bearer token through its
environment (not its command line) and loads weights only from ``weights_root``.
``start_sglang_servers`` does the same with ``python -m sglang.launch_server`` (needs the
``gpu`` extra and CUDA; one GPU per server via ``--base-gpu-id``). Waits are bounded; a server
that exits or stays unhealthy raises with the tail of its log.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from operators.rollout.guard import TOKEN_ENV, auth_headers

__all__ = ["ServerProcess", "start_local_servers", "start_sglang_servers", "wait_healthy"]


@dataclass
class ServerProcess:
    """A running server: its process, URL and log file."""

    process: subprocess.Popen
    url: str
    log_path: Path

    def stop(self, timeout_s: float = 10.0) -> None:
        """Terminate (then kill after ``timeout_s``) and reap the process."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        """SIGKILL, as a crash would (tests use this)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def wait_healthy(server: ServerProcess, timeout_s: float, token: str = "") -> None:
    """Poll ``/health`` until it answers 200; raise if the process dies or time runs out."""
    headers = auth_headers(token) if token else {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"rollout server {server.url} exited with {server.process.returncode}:\n"
                f"{server.log_tail()}"
            )
        try:
            answer = httpx.get(f"{server.url}/health", timeout=2.0, headers=headers)
            if answer.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.stop()
    raise TimeoutError(f"rollout server {server.url} not healthy after {timeout_s:.0f}s")


def _spawn(cmd: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )


def start_local_servers(
    model_path: str,
    count: int,
    *,
    token: str,
    weights_root: str | Path,
    max_batch_size: int = 256,
    threads: int = 1,
    host: str = "127.0.0.1",
    timeout_s: float = 180.0,
    log_dir: str | Path | None = None,
) -> list[ServerProcess]:
    """Start ``count`` rldag rollout servers for ``model_path`` behind ``token``; all healthy
    on return."""
    logs = Path(log_dir or tempfile.mkdtemp(prefix="rldag-rollout-"))
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    env[TOKEN_ENV] = token
    started: list[tuple[subprocess.Popen, Path, Path]] = []
    for i in range(count):
        port_file = logs / f"server-{i}.port"
        port_file.unlink(missing_ok=True)
        cmd = [
            sys.executable, "-m", "operators.rollout.server", "--model-path", str(model_path),
            "--weights-root", str(weights_root), "--host", host, "--port", "0",
            "--port-file", str(port_file),
            "--max-batch-size", str(max_batch_size), "--threads", str(threads),
            "--parent-pid", str(os.getpid()),
        ]  # fmt: skip
        log_path = logs / f"server-{i}.log"
        started.append((_spawn(cmd, log_path, env), port_file, log_path))
    servers: list[ServerProcess] = []
    deadline = time.monotonic() + timeout_s
    try:
        for process, port_file, log_path in started:
            while not port_file.exists():
                if process.poll() is not None or time.monotonic() > deadline:
                    tail = log_path.read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"rollout server failed to start:\n{tail}")
                time.sleep(0.1)
            server = ServerProcess(process, f"http://{host}:{port_file.read_text()}", log_path)
            servers.append(server)
            wait_healthy(server, max(deadline - time.monotonic(), 1.0), token)
    except BaseException:
        for process, _, _ in started:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        raise
    return servers


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def start_sglang_servers(
    model_path: str,
    count: int,
    *,
    token: str,
    host: str = "127.0.0.1",
    gpus_per_server: int = 1,
    extra_args: tuple[str, ...] = (),
    timeout_s: float = 900.0,
    log_dir: str | Path | None = None,
) -> list[ServerProcess]:
    """Launch ``count`` real SGLang servers (``python -m sglang.launch_server``), one per GPU
    group, each behind ``token`` (SGLang's ``--api-key``; it takes it only on its command
    line, and cannot restrict weight paths). Not run in this repository's tests: SGLang needs
    CUDA and the ``gpu`` extra."""
    import importlib.util

    if importlib.util.find_spec("sglang") is None:
        raise RuntimeError("engine: sglang needs SGLang: pip install 'rldag[gpu]' (CUDA only)")
    logs = Path(log_dir or tempfile.mkdtemp(prefix="rldag-sglang-"))
    logs.mkdir(parents=True, exist_ok=True)
    servers = []
    for i in range(count):
        port = _free_port(host)
        cmd = [
            sys.executable, "-m", "sglang.launch_server", "--model-path", str(model_path),
            "--host", host, "--port", str(port), "--tp-size", str(gpus_per_server),
            "--base-gpu-id", str(i * gpus_per_server), "--api-key", token, *extra_args,
        ]  # fmt: skip
        log_path = logs / f"sglang-{i}.log"
        servers.append(
            ServerProcess(
                _spawn(cmd, log_path, dict(os.environ)), f"http://{host}:{port}", log_path
            )
        )
    try:
        for server in servers:
            wait_healthy(server, timeout_s, token)
    except BaseException:
        for server in servers:
            server.kill()
        raise
    return servers
