"""Real servers for the tracker tests: an MLflow tracking server on a free loopback port, a
TCP proxy in front of it that can be cut (the server "gone" mid-run), and a reader of W&B's
offline run files (a LevelDB-style log of protobuf records)."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from flows.embedded_server import free_port


class MlflowServer:
    """`mlflow server` with a SQLite backend and proxied artifacts under `root`. It starts in
    the background (10-25 s); `url` waits until it is healthy."""

    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self._url = f"http://127.0.0.1:{self.port}"
        self._healthy = False
        mlflow = Path(sys.executable).with_name("mlflow")
        env = os.environ | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.log = open(root / "mlflow-server.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [str(mlflow), "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
             "--artifacts-destination", str(root / "artifacts")],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip

    @property
    def url(self) -> str:
        if not self._healthy:
            self._wait(timeout=120)
        return self._url

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: see {self.log.name}")
            try:
                with urllib.request.urlopen(f"{self._url}/health", timeout=2) as r:
                    if r.status == 200:
                        self._healthy = True
                        return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"mlflow server not healthy after {timeout} s")

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)  # the server and its uvicorn worker
        self.proc.wait(timeout=30)
        self.log.close()


class TcpProxy:
    """Forwards 127.0.0.1:<port> to `target`; `cut()` closes it and every connection."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._sockets: list[socket.socket] = []
        self._cut = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self._cut:
                client.close()
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        self._cut = True
        try:  # wakes the blocked accept(); close() alone leaves it accepting on Linux
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        for s in self._sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def wandb_records(run_dir: Path) -> list:
    """Every record of an offline W&B run (`run-<id>.wandb`): a 7-byte header (":W&B", magic,
    version), then LevelDB log blocks of 32 KiB whose chunks (7-byte header: crc32, length,
    type full/first/middle/last) carry serialized `Record` protobufs."""
    from wandb.proto import wandb_internal_pb2

    data = next(run_dir.glob("run-*.wandb")).read_bytes()
    assert data[:4] == b":W&B"
    block, pos, partial, payloads = 32768, 7, b"", []
    while pos + 7 <= len(data):
        room = block - pos % block
        if room < 7:  # a block's tail too short for a header is padding
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0:  # zero padding
            pos += room - 7 - length
        elif kind == 1:
            payloads.append(chunk)
        elif kind == 2:
            partial = chunk
        elif kind == 3:
            partial += chunk
        elif kind == 4:
            payloads.append(partial + chunk)
    records = []
    for payload in payloads:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        records.append(record)
    return records
