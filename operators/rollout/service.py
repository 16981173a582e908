"""The rollout pool as services: N servers (ours or SGLang), a client, and the weights edge.

``RolloutService`` starts the servers (``engine: server`` -> rldag rollout servers on this
machine, ``engine: sglang`` -> ``sglang.launch_server``) or connects to running ones
(``server_urls``, whose token is read from ``RLDAG_ROLLOUT_TOKEN``), sends prompt groups
through a ``RolloutClient`` and pushes new policy versions: the trainer's weights are written
once as an HF checkpoint directory under ``weights_dir``, then every server loads it through
``/update_weights_from_disk`` with ``weight_version`` set, so each generated row reports the
version that actually produced it. A push can let the requests in flight finish first (the
default), abort them, or retract them (``InFlight``): then each interrupted response is
continued by the new weights and reports both versions. A checkpoint directory under
``weights_dir`` is pushed as is (a trainer that already wrote one saves the copy); one
elsewhere is hard-linked into it first (servers load nothing outside it). The servers this
service starts get a bearer token made for them and accept no other request.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from operators.rollout.client import RolloutClient
from operators.rollout.guard import TOKEN_ENV, inside, new_token
from operators.rollout.launch import ServerProcess, start_local_servers, start_sglang_servers
from operators.rollout.sampling import Completion, SamplingParams
from operators.rollout.weight_update import InFlight
from operators.rollout.weights import load_checkpoint, save_checkpoint

__all__ = ["RolloutService"]


class RolloutService:
    """Servers + client + versioned weight pushes for one generate node."""

    def __init__(
        self,
        model_path: str,
        *,
        engine: str = "server",
        servers: int = 2,
        server_urls: list[str] | None = None,
        threads: int = 1,
        max_batch_size: int = 256,
        weights_dir: str = "",
        timeout_s: float = 600.0,
        sglang_args: tuple[str, ...] = (),
    ) -> None:
        self.model_path = model_path
        self.processes: list[ServerProcess] = []
        self._own_dir = not weights_dir
        self.weights_dir = Path(weights_dir or tempfile.mkdtemp(prefix="rldag-weights-"))
        self.weights_dir.mkdir(parents=True, exist_ok=True)
        token = new_token()  # this service's servers accept no other
        if server_urls:
            urls, token = list(server_urls), os.environ.get(TOKEN_ENV, "")
        elif engine == "server":
            self.processes = start_local_servers(
                model_path,
                servers,
                token=token,
                weights_root=self.weights_dir,
                max_batch_size=max_batch_size,
                threads=threads,
            )
            urls = [p.url for p in self.processes]
        elif engine == "sglang":
            self.processes = start_sglang_servers(
                model_path, servers, token=token, extra_args=sglang_args
            )
            urls = [p.url for p in self.processes]
        else:
            raise ValueError(f"engine must be server or sglang here, got {engine!r}")
        # rldag's servers keep a session's cache when asked; SGLang's radix cache needs no ask
        caches = engine == "server" and not server_urls
        self.client = RolloutClient(urls, timeout_s=timeout_s, token=token, session_caches=caches)
        self.checkpoint: Path | None = None  # the directory the servers loaded last
        self.last_push_s = 0.0

    def generate(
        self, prompt_ids: list[list[int]], params: SamplingParams, seeds: list[int]
    ) -> list[tuple[list[Completion], int]]:
        """Completions per prompt group, each group with the oldest policy version its server
        reported (each completion's ``versions`` has them all)."""
        return self.client.generate(prompt_ids, params, seeds)

    def push(
        self,
        weights: dict[str, torch.Tensor] | str | Path,
        version: int,
        in_flight: InFlight = InFlight.finish,
    ) -> Path:
        """Make every server serve ``weights`` as policy ``version``; returns the directory.

        ``in_flight`` says what happens to the requests the servers are generating now."""
        start = time.perf_counter()
        if isinstance(weights, (str, Path)) and inside(weights, self.weights_dir):
            path = Path(weights)
        elif isinstance(weights, (str, Path)):  # servers load only from the weights directory
            path = self.weights_dir / f"policy-v{version}"
            shutil.copytree(weights, path, copy_function=_link_or_copy, dirs_exist_ok=True)
        else:
            target = self.weights_dir / f"policy-v{version}"
            path = save_checkpoint(weights, target, like=self.model_path)
        self.client.update_weights_from_disk(str(path), version, in_flight)
        previous, self.checkpoint = self.checkpoint, path
        if previous is not None and previous != path and previous.parent == self.weights_dir:
            shutil.rmtree(previous, ignore_errors=True)  # keep only what servers serve now
        self.last_push_s = time.perf_counter() - start
        return path

    def weights(self) -> dict[str, Any]:
        """The weights the servers serve (from the last pushed checkpoint, or the model)."""
        return load_checkpoint(self.checkpoint or self.model_path)

    def close(self) -> None:
        """Stop the servers this service started and remove its own weights directory."""
        self.client.close()
        for process in self.processes:
            process.stop()
        self.processes = []
        if self._own_dir:
            shutil.rmtree(self.weights_dir, ignore_errors=True)


def _link_or_copy(src: str, dst: str) -> None:
    """A hard link where the file system allows one (no bytes copied), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
