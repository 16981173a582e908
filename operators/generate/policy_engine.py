"""The policy copy a generate operator samples from, and the weights edge into it.

``engine`` picks where sampling runs: ``torch`` in this process (the policy copy is updated in
memory along the weights edge: the colocated case), ``server`` on N local rldag rollout
servers, ``sglang`` on N SGLang servers (both behind ``RolloutService``: the weights edge writes
a checkpoint directory and calls ``/update_weights_from_disk``). Shared by the single-turn
``torch_engine`` and the multi-turn ``agent_loop`` operators.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from omegaconf import MISSING

from operators.generate.prompt_checks import model_context
from operators.model import weights_digest as digests
from operators.model.lora_weights import is_adapter, nbytes
from rldag import NodeContext, RunError, SpecError, check_choice, check_positive

if TYPE_CHECKING:  # torch is imported where generation runs, not when the pipeline loads
    from operators.rollout.engine_loop import EngineLoop
    from operators.rollout.sampling import SamplingParams
    from operators.rollout.weight_update import InFlight

ENGINES = ("torch", "server", "sglang")


@dataclass
class EngineParams:
    """Where and how a generate operator samples (SGLang-style sampling params)."""

    model_path: str = MISSING  # HF model directory (from_pretrained)
    n: int = 1  # samples per prompt (the GRPO group size)
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = -1  # -1 = off
    stop: list[str] = field(default_factory=list)  # stop strings
    stop_token_ids: list[int] = field(default_factory=list)  # in addition to EOS
    ignore_eos: bool = False  # decode past eos up to max_new_tokens (benchmarks)
    max_batch_size: int = 256  # sequences decoded together (per engine / server)
    device: str = "cpu"
    engine: str = "torch"  # torch (in process) | server (rldag servers) | sglang
    servers: int = 2  # rollout servers to start for engine server | sglang
    server_urls: list[str] = field(default_factory=list)  # use running servers instead
    server_threads: int = 1  # torch threads per rldag rollout server
    weights_dir: str = ""  # where policy versions are written for servers ("" = a temp dir)
    request_timeout_s: float = 600.0  # per /generate request, then it is re-sent elsewhere
    sglang_args: list[str] = field(default_factory=list)  # extra sglang.launch_server flags

    def __post_init__(self) -> None:
        check_positive("n", self.n)
        check_positive("temperature", self.temperature, allow_zero=True)
        check_positive("servers", self.servers)
        check_positive("server_threads", self.server_threads)
        check_choice("engine", self.engine, ENGINES)
        if not 0 < self.top_p <= 1:
            raise SpecError(f"must be in (0, 1], got {self.top_p}", path="top_p")


class PolicyEngine:
    """The engine (in process) or the rollout service (servers), its tokenizer and the
    policy version it holds."""

    def __init__(self, params: EngineParams) -> None:
        self.p = params
        self.policy_version = 0
        self.loaded: dict[str, float] = {}  # the last weights edge's figures, until reported
        self.context = model_context(params.model_path)  # prompt + answer must fit in it
        self.engine = self.service = None
        self.loop: EngineLoop | None = None  # continuous mode: a thread stepping the engine
        self._loop_lock = threading.Lock()  # a direct weight load never meets a stepping loop
        self._continuous = False  # a continuous stream ran (servers keep sequences on update)
        self.digest = ""  # of the weights it serves ("" on rollout servers: not attested)
        if params.engine == "torch":
            from operators.rollout.torch_engine import TorchEngine

            self.engine = TorchEngine.from_pretrained(
                params.model_path, device=params.device, max_batch_size=params.max_batch_size
            )
            self.tokenizer = self.engine.tokenizer
            self.digest = digests.weights_digest(self.engine.state_dict())
        else:
            from operators.model.hf import load_tokenizer
            from operators.rollout.service import RolloutService

            self.tokenizer = load_tokenizer(params.model_path)
            self.service = RolloutService(
                params.model_path,
                engine=params.engine,
                servers=params.servers,
                server_urls=params.server_urls,
                threads=params.server_threads,
                max_batch_size=params.max_batch_size,
                weights_dir=params.weights_dir,
                timeout_s=params.request_timeout_s,
                sglang_args=tuple(params.sglang_args),
            )

    def export_weights(self) -> dict:
        return self.engine.state_dict() if self.engine is not None else self.service.weights()

    def load_weights(self, weights: dict | str, version: int) -> None:
        """In process: copy the tensors (merge a LoRA adapter); servers: push a checkpoint
        (or a checkpoint dir). The edge's bytes, tensors and load seconds are reported with
        the next rollout table (``weights/bytes``, ``weights/tensors``, ``weights/load_s``)."""
        from operators.rollout.weight_update import InFlight

        start = time.perf_counter()
        adapter = isinstance(weights, dict) and is_adapter(weights)
        if self.engine is not None:
            with self._loop_lock:
                if self.loop is None:
                    self.engine.load_state_dict(weights)
                else:  # between two decode steps; running sequences go on under them
                    self.loop.update_weights(weights, str(version), InFlight.keep).result()
            self.digest = self._served_digest(weights, adapter)
        elif adapter and self.p.engine == "sglang":
            raise RunError("engine sglang loads full weights; with LoRA use engine torch or server")
        else:
            self.service.push(weights, version, self.in_flight)
        self.policy_version = version
        if isinstance(weights, dict):
            self.loaded = {
                "weights/bytes": nbytes(weights),
                "weights/tensors": len(weights),
                "weights/lora": float(adapter),
                "weights/load_s": time.perf_counter() - start,
            }

    @property
    def in_flight(self) -> InFlight:
        """What a weight update does to the servers' sequences in flight: they continue
        (`keep`) once a continuous stream has run, else they finish first."""
        from operators.rollout.weight_update import InFlight

        return InFlight.keep if self._continuous else InFlight.finish

    def engine_loop(self) -> EngineLoop:
        """The thread that steps the in-process engine for overlapping streams (continuous
        mode), started on first use with the version the engine holds."""
        from operators.rollout.engine_loop import EngineLoop

        with self._loop_lock:
            self._continuous = True
            if self.loop is None:
                self.loop = EngineLoop(self.engine, weight_version=str(self.policy_version))
            return self.loop

    def _served_digest(self, loaded: dict, adapter: bool) -> str:
        """The digest of the weights the engine serves now (read back from its model) over
        what `loaded` changed: its tensors, or the layers its adapter was merged into."""
        serving = self.engine.state_dict()
        if adapter:
            base = digests.base_samples(self.engine.lora_base, digests.adapted(loaded))
            return digests.served_adapter_digest(serving, base, loaded)
        return digests.weights_digest({n: serving[n] for n in loaded if n in serving})

    def weights_digest(self) -> str:
        """The digest of the weights it serves (rldag.graph.operator.AttestsWeights)."""
        return self.digest

    def with_digest(self, table: pa.Table) -> pa.Table:
        """`table` with the `weights_digest` column: what generated its rows."""
        digest = pa.array([self.digest] * table.num_rows, pa.string())
        return table.append_column("weights_digest", digest)

    def close(self) -> None:
        if self.loop is not None:
            self.loop.close()
        if self.service is not None:
            self.service.close()

    def __call__(self, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> pa.Table:
        """The whole output table: the subclass's ``stream`` as one chunk."""
        (table,) = self.stream(inputs, replace(ctx, chunk_groups=0))
        return table

    def sampling(self, ctx: NodeContext, max_new_tokens: int) -> tuple[SamplingParams, int]:
        """The iteration's sampling params and a second base seed (server groups, episodes):
        a pure function of (seed, iteration, refill round)."""
        from operators.rollout.sampling import SamplingParams

        key = [ctx.seed, ctx.iteration] + ([ctx.round] if ctx.round else [])  # round 0: as ever
        seeds = np.random.SeedSequence(key).generate_state(2, np.uint64)
        params = SamplingParams(
            n=self.p.n,
            temperature=self.p.temperature,
            top_p=self.p.top_p,
            top_k=self.p.top_k,
            max_new_tokens=max_new_tokens,
            stop=tuple(self.p.stop),
            stop_token_ids=tuple(self.p.stop_token_ids),
            ignore_eos=self.p.ignore_eos,
            seed=int(seeds[0] >> np.uint64(1)),
        )
        return params, int(seeds[1] >> np.uint64(1))
