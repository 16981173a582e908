"""`torch_engine` generate operator: n samples per prompt from the rollout pool.

Expands each prompt row into its n samples (grouped, in order) and adds the generate columns of
the vocabulary. Where sampling runs (``engine``: torch, server, sglang) and how weights reach it
is operators/generate/policy_engine.py. Every row's ``policy_version`` is the version of the weights
that generated it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from concurrent.futures import as_completed
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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


def token_versions(completion: Any, version: int) -> list[int]:
    """The policy version that sampled each token of `completion`: from the version starts
    it records when it spans weight updates (operators.rollout.weight_update), else
    `version` for all."""
    starts = completion.versions or ((0, version),)
    out, n = [], len(completion.token_ids)
    bounds = [int(s) for s, _ in starts[1:]] + [n]
    for (start, label), end in zip(starts, bounds, strict=True):
        out += [int(label)] * (min(end, n) - int(start))
    return out


def rollout_table(
    prompts: pa.Table, prompt_ids: list[list[int]], groups: list[list[Any]], versions: list[int]
) -> pa.Table:
    """``prompts`` with each row repeated per sample and the generate columns appended.

    ``versions`` holds one policy version per group; where the completions report the versions
    that generated them (rollout servers, continuous mode), each token gets its own
    (``response_versions``), the row its oldest as ``policy_version`` and its newest as
    ``policy_version_max``."""
    counts = [len(g) for g in groups]
    done = [c for group in groups for c in group]
    row_versions = [v for v, k in zip(versions, counts, strict=True) for _ in range(k)]
    per_token = [token_versions(c, v) for c, v in zip(done, row_versions, strict=True)]
    spans = [
        (min(t, default=v), max(t, default=v)) for t, v in zip(per_token, row_versions, strict=True)
    ]
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
        "policy_version": pa.array([low for low, _ in spans], pa.int64()),
        "policy_version_max": pa.array([high for _, high in spans], pa.int64()),
        "response_versions": pa.array(per_token, ids),
    }
    for name, values in new.items():
        table = table.append_column(name, values)
    return table


if TYPE_CHECKING:
    from operators.rollout.sampling import SamplingParams


class TorchGenerate(PolicyEngine):
    """Tokenises prompts, samples on the chosen engine, and builds the rollout table."""

    _busy_reported = 0.0  # the engine's slot-seconds already reported

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
        self._continuous |= ctx.continuous  # servers keep sequences in flight on updates
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
            finished = self._from_loop(prompt_ids, params) if ctx.continuous else None
            for index, completions in finished or self.engine.generate_stream(prompt_ids, params):
                ready.append((index, completions))
                if len(ready) == size:
                    yield self._report(self._chunk(prompts, prompt_ids, ready), ctx)
                    ready = []
            if ready:
                yield self._report(self._chunk(prompts, prompt_ids, ready), ctx)

    def _from_loop(
        self, prompt_ids: list[list[int]], params: SamplingParams
    ) -> Iterator[tuple[int, list[Any]]]:
        """`(prompt index, completions)` as each group finishes on the engine loop, where
        the prompts of overlapping iterations share the batch (the same samples as
        `generate_stream`: each keyed by the iteration's seed and the prompt's index)."""
        from operators.rollout.engine_loop import GenerateItem

        items = [GenerateItem(p, params, params.seed, i) for i, p in enumerate(prompt_ids)]
        futures = self.engine_loop().generate_each(items)
        index = {future: i for i, future in enumerate(futures)}
        for future in as_completed(futures):
            yield index[future], future.result()[0]

    def _report(self, table: pa.Table, ctx: NodeContext) -> pa.Table:
        """A chunk with the digest of the weights that generated it; the first carries the
        figures of the weights loaded for this iteration, and each the slot-seconds the
        engine decoded since the last (summed over the step's chunks)."""
        table = self.with_digest(table)
        reported, self.loaded = self.loaded, {}
        if self.engine is not None:
            with self._loop_lock:  # overlapping streams report each slot-second once
                busy = self.engine.batcher.busy_slot_s
                reported |= {"rollout/busy_slot_s": busy - self._busy_reported}
                self._busy_reported = busy
        return with_reported_metrics(table, ctx.node, reported) if reported else table

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
    adds=(*GENERATE_COLUMNS, *columns("policy_version_max", "response_versions", "weights_digest")),
    params=GenerateParams,
    stateful=True,
    emits_chunks=True,
    continuous=True,
    check_input=check_chat_prompts,
    description="Sampling n per prompt with logprobs: in process (torch) or on rollout servers.",
)
