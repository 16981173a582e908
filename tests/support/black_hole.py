"""A TCP proxy on loopback that forwards to a real server until it is silenced; from then on
it accepts connections and reads what they send but answers nothing, as a hung endpoint
behind a live load balancer does (connections open, no byte back, no reset)."""

from __future__ import annotations

import contextlib
import socket
import threading


class BlackHoleProxy:
    """Forwards `127.0.0.1:<port>` to `target` until `silence()`; `close()` ends it."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.silent = threading.Event()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True, name="black-hole").start()

    def silence(self) -> None:
        """Answer nothing from now on, on new connections and on those already open."""
        self.silent.set()

    def close(self) -> None:
        self._closed.set()
        for sock in (self._listener, *self._sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            if self.silent.is_set():
                self._pump(client, None)
                continue
            upstream = socket.create_connection(self.target)
            self._sockets.append(upstream)
            self._pump(client, upstream)
            self._pump(upstream, client)

    def _pump(self, source: socket.socket, sink: socket.socket | None) -> None:
        """Copy `source` into `sink` in a thread until silenced; then read and drop."""

        def run() -> None:
            with contextlib.suppress(OSError):
                while data := source.recv(65536):
                    if sink is not None and not self.silent.is_set():
                        sink.sendall(data)

        threading.Thread(target=run, daemon=True, name="black-hole-pump").start()
