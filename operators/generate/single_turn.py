"""`torch_engine` generate operator: n samples per prompt from the rollout pool.

Expands each prompt row into its n samples (grouped, in order) and adds the generate columns of
the vocabulary. Where sampling runs (``engine``: torch, server, sglang) and how weights reach it
is operators/generate/policy_engine.py. Every row's ``policy_version`` is the version of the weights
that generated it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from operators.generate.policy_engine import EngineParams, PolicyEngine
from operators.generate.prompt_checks import check_prompt_lengths
from operators.model.prompts import MOSTLY_UNKNOWN, encode_prompt, lost_fraction, prompt_text
from operators.model.tokenizer_checks import require_chat_template, tokenizer_of
from rldag import (
    NodeContext,
    NodeKind,
    OperatorDef,
    Port,
    check_positive,
    columns,
    with_reported_metrics,
)


@dataclass
class GenerateParams(EngineParams):
    """Parameters of the `torch_engine` generate operator (SGLang-style sampling params)."""

    max_new_tokens: int = 16

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("max_new_tokens", self.max_new_tokens)


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


class TorchGenerate(PolicyEngine):
    """Tokenises prompts, samples on the chosen engine, and builds the rollout table."""

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
        params, base = self.sampling(ctx, self.p.max_new_tokens)
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
        """A chunk with the digest of the weights that generated it, carrying the figures of
        the weights loaded for this iteration."""
        table = self.with_digest(table)
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


# What a generate operator reads and the generate columns of the vocabulary it adds.
GENERATE_PORTS = (
    Port("prompts", columns("prompt_id", "prompt")),
    Port("weights", weights=True, optional=True),
)
GENERATE_COLUMNS = columns(
    "sample_idx",
    "response",
    "prompt_ids",
    "response_ids",
    "response_logprobs",
    "finish_reason",
    "policy_version",
)


def check_chat_prompts(params: EngineParams, inputs: Mapping[str, pa.Schema]) -> None:
    """Chat-message prompts are rendered by the tokenizer's chat template: it must have one."""
    prompts = inputs.get("prompts")
    if prompts is None or "prompt" not in prompts.names:
        return
    if pa.types.is_string(prompts.field("prompt").type):
        return
    tokenizer = tokenizer_of(params.model_path)
    require_chat_template(tokenizer, "the prompts are chat messages, rendered by it")


TORCH_ENGINE = OperatorDef(
    name="torch_engine",
    kind=NodeKind.generate,
    factory=TorchGenerate,
    ports=GENERATE_PORTS,
    adds=(*GENERATE_COLUMNS, *columns("weights_digest")),
    params=GenerateParams,
    stateful=True,
    emits_chunks=True,
    check_input=check_chat_prompts,
    description="Sampling n per prompt with logprobs: in process (torch) or on rollout servers.",
)
