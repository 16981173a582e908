"""`torch_engine` generate operator: n samples per prompt from the rollout pool.

Expands each prompt row into its n samples (grouped, in order) and adds the generate columns of
the vocabulary. ``engine`` picks where sampling runs: ``torch`` in this process (the policy copy
is updated in memory along the weights edge: the colocated case), ``server`` on N local rldag
rollout servers, ``sglang`` on N SGLang servers (both behind ``RolloutService``: the weights
edge writes a checkpoint directory and calls ``/update_weights_from_disk``). Every row's
``policy_version`` is the version of the weights that generated it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from omegaconf import MISSING

from operators.lora_weights import is_adapter, nbytes
from operators.prompt_checks import check_prompt_lengths, model_context
from operators.prompts import MOSTLY_UNKNOWN, encode_prompt, lost_fraction, prompt_text
from rldag.errors import RunError, SpecError
from rldag.metrics import with_reported_metrics
from rldag.operator import NodeContext, OperatorDef, Port
from rldag.schema import columns
from rldag.spec import NodeKind, check_choice, check_positive

if TYPE_CHECKING:  # torch is imported where generation runs, not when the pipeline loads
    from operators.rollout.sampling import SamplingParams

ENGINES = ("torch", "server", "sglang")


@dataclass
class GenerateParams:
    """Parameters of the `torch_engine` generate operator (SGLang-style sampling params)."""

    model_path: str = MISSING  # HF model directory (from_pretrained)
    n: int = 1  # samples per prompt (the GRPO group size)
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = -1  # -1 = off
    max_new_tokens: int = 16
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
        check_positive("max_new_tokens", self.max_new_tokens)
        check_positive("temperature", self.temperature, allow_zero=True)
        check_positive("servers", self.servers)
        check_positive("server_threads", self.server_threads)
        check_choice("engine", self.engine, ENGINES)
        if not 0 < self.top_p <= 1:
            raise SpecError(f"must be in (0, 1], got {self.top_p}", path="top_p")


def rollout_table(
    prompts: pa.Table, prompt_ids: list[list[int]], groups: list[list[Any]], versions: list[int]
) -> pa.Table:
    """``prompts`` with each row repeated per sample and the generate columns appended.

    ``versions`` holds one policy version per group; where the completions report the versions
    that generated them (rollout servers), each row gets its oldest as ``policy_version`` and
    its newest as ``policy_version_max``."""
    counts = [len(g) for g in groups]
    done = [c for group in groups for c in group]
    row_versions = [v for v, k in zip(versions, counts, strict=True) for _ in range(k)]
    table = prompts.take(np.repeat(np.arange(prompts.num_rows), counts))
    ids = pa.list_(pa.int32())
    new = {
        "sample_idx": pa.array([j for k in counts for j in range(k)], pa.int32()),
        "response": pa.array([c.text for c in done], pa.string()),
        "prompt_ids": pa.array(
            [p for p, k in zip(prompt_ids, counts, strict=True) for _ in range(k)], ids
        ),
        "response_ids": pa.array([c.token_ids for c in done], ids),
        "response_logprobs": pa.array([c.logprobs for c in done], pa.list_(pa.float32())),
        "finish_reason": pa.array([c.finish_reason for c in done], pa.string()),
        "policy_version": pa.array(row_versions, pa.int64()),
    }
    if any(c.versions for c in done):  # a response may span weight updates
        for name, end in (("policy_version", 0), ("policy_version_max", -1)):
            rows = zip(done, row_versions, strict=True)
            seen = [int(c.versions[end][1]) if c.versions else v for c, v in rows]
            new[name] = pa.array(seen, pa.int64())
    for name, values in new.items():
        table = table.append_column(name, values)
    return table


class TorchGenerate:
    """Tokenises prompts, samples on the chosen engine, and builds the rollout table."""

    def __init__(self, params: GenerateParams) -> None:
        self.p = params
        self.policy_version = 0
        self.loaded: dict[str, float] = {}  # the last weights edge's figures, until reported
        self.context = model_context(params.model_path)  # prompt + answer must fit in it
        self.engine = self.service = None
        if params.engine == "torch":
            from operators.rollout.torch_engine import TorchEngine

            self.engine = TorchEngine.from_pretrained(
                params.model_path, device=params.device, max_batch_size=params.max_batch_size
            )
            self.tokenizer = self.engine.tokenizer
        else:
            from transformers import AutoTokenizer

            from operators.rollout.service import RolloutService

            self.tokenizer = AutoTokenizer.from_pretrained(params.model_path)
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
        start = time.perf_counter()
        adapter = isinstance(weights, dict) and is_adapter(weights)
        if self.engine is not None:
            self.engine.load_state_dict(weights)
        elif adapter and self.p.engine == "sglang":
            raise RunError("engine sglang loads full weights; with LoRA use engine torch or server")
        else:
            self.service.push(weights, version)
        self.policy_version = version
        if isinstance(weights, dict):
            self.loaded = {
                "weights/bytes": nbytes(weights),
                "weights/tensors": len(weights),
                "weights/lora": float(adapter),
                "weights/load_s": time.perf_counter() - start,
            }

    def close(self) -> None:
        if self.service is not None:
            self.service.close()

    def _encode(self, prompts: pa.Table, ctx: NodeContext) -> list[list[int]]:
        """Token ids per prompt row; warns (naming the node) when prompts are mostly
        characters the tokenizer cannot represent."""
        rows = prompts["prompt"].to_pylist()
        ids = [encode_prompt(self.tokenizer, p) for p in rows]
        lost = [
            lost_fraction(self.tokenizer, prompt_text(self.tokenizer, p), i)
            for p, i in zip(rows, ids, strict=True)
        ]
        bad = [k for k, f in enumerate(lost) if f > MOSTLY_UNKNOWN]
        if bad:
            first = prompts["prompt_id"][bad[0]].as_py()
            ctx.log.warning(
                "node '%s' (iteration %d): %d of %d prompts are mostly characters the "
                "tokenizer of %s cannot represent (%.0f%% of their characters lost; first: "
                "prompt_id %s)",
                ctx.node,
                ctx.iteration,
                len(bad),
                len(rows),
                self.p.model_path,
                100 * sum(lost[k] for k in bad) / len(bad),
                first,
            )
        return ids

    def _sampling(self, ctx: NodeContext) -> tuple[SamplingParams, int]:
        """The iteration's sampling params and its base seed for server groups: a pure
        function of (seed, iteration)."""
        from operators.rollout.sampling import SamplingParams

        seeds = np.random.SeedSequence([ctx.seed, ctx.iteration]).generate_state(2, np.uint64)
        params = SamplingParams(
            n=self.p.n,
            temperature=self.p.temperature,
            top_p=self.p.top_p,
            top_k=self.p.top_k,
            max_new_tokens=self.p.max_new_tokens,
            stop=tuple(self.p.stop),
            stop_token_ids=tuple(self.p.stop_token_ids),
            ignore_eos=self.p.ignore_eos,
            seed=int(seeds[0] >> np.uint64(1)),
        )
        return params, int(seeds[1] >> np.uint64(1))

    def stream(self, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> Iterator[pa.Table]:
        """Rollout tables of `ctx.chunk_groups` finished prompt groups at a time (0: one
        table), each in prompt order; the rows do not depend on the chunking."""
        prompts = inputs["prompts"]
        prompt_ids = self._encode(prompts, ctx)
        check_prompt_lengths(
            prompt_ids,
            self.p.max_new_tokens,
            self.context,
            ctx.node,
            ctx.iteration,
            prompts["prompt_id"].to_pylist(),
        )
        params, base = self._sampling(ctx)
        if self.engine is None:  # servers answer whole requests
            seeds = [(base + i * 0x9E3779B97F4A7C15) % (1 << 63) for i in range(len(prompt_ids))]
            answers = self.service.generate(prompt_ids, params, seeds)
            groups = [completions for completions, _ in answers]
            versions = [version for _, version in answers]
            yield self._report(rollout_table(prompts, prompt_ids, groups, versions), ctx)
        else:
            size = ctx.chunk_groups or len(prompt_ids)
            ready: list[tuple[int, list[Any]]] = []
            for index, completions in self.engine.generate_stream(prompt_ids, params):
                ready.append((index, completions))
                if len(ready) == size:
                    yield self._report(self._chunk(prompts, prompt_ids, ready), ctx)
                    ready = []
            if ready:
                yield self._report(self._chunk(prompts, prompt_ids, ready), ctx)
        self.loaded = {}

    def _report(self, table: pa.Table, ctx: NodeContext) -> pa.Table:
        """A chunk carrying the figures of the weights loaded for this iteration."""
        return with_reported_metrics(table, ctx.node, self.loaded) if self.loaded else table

    def _chunk(
        self, prompts: pa.Table, prompt_ids: list[list[int]], ready: list[tuple[int, list[Any]]]
    ) -> pa.Table:
        rows = sorted(index for index, _ in ready)
        groups = dict(ready)
        return rollout_table(
            prompts.take(rows),
            [prompt_ids[i] for i in rows],
            [groups[i] for i in rows],
            [self.policy_version] * len(rows),
        )

    def __call__(self, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> pa.Table:
        (table,) = self.stream(inputs, replace(ctx, chunk_groups=0))
        return table


TORCH_ENGINE = OperatorDef(
    name="torch_engine",
    kind=NodeKind.generate,
    factory=TorchGenerate,
    ports=(
        Port("prompts", columns("prompt_id", "prompt")),
        Port("weights", weights=True, optional=True),
    ),
    adds=columns(
        "sample_idx",
        "response",
        "prompt_ids",
        "response_ids",
        "response_logprobs",
        "finish_reason",
        "policy_version",
    ),
    params=GenerateParams,
    stateful=True,
    emits_chunks=True,
    description="Sampling n per prompt with logprobs: in process (torch) or on rollout servers.",
)
