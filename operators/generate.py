"""`torch_engine` generate operator: n samples per prompt from the torch rollout engine.

Expands each prompt row into its n samples (grouped, in order) and adds the generate columns
of the vocabulary. It holds a copy of the policy that the weights edge updates in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from omegaconf import MISSING

from rldag.errors import SpecError
from rldag.operator import NodeContext, OperatorDef, Port
from rldag.schema import columns
from rldag.spec import NodeKind, check_positive


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
    max_batch_size: int = 256  # sequences decoded together
    device: str = "cpu"

    def __post_init__(self) -> None:
        check_positive("n", self.n)
        check_positive("max_new_tokens", self.max_new_tokens)
        check_positive("temperature", self.temperature, allow_zero=True)
        if not 0 < self.top_p <= 1:
            raise SpecError(f"must be in (0, 1], got {self.top_p}", path="top_p")


class TorchGenerate:
    """Owns a TorchEngine; tokenises prompts, samples, and builds the rollout table."""

    def __init__(self, params: GenerateParams) -> None:
        from operators.rollout.torch_engine import TorchEngine

        self.p = params
        self.engine = TorchEngine.from_pretrained(
            params.model_path, device=params.device, max_batch_size=params.max_batch_size
        )
        self.tokenizer = self.engine.tokenizer
        self.policy_version = 0

    def export_weights(self) -> dict:
        return self.engine.state_dict()

    def load_weights(self, weights: dict, version: int) -> None:
        self.engine.load_state_dict(weights)
        self.policy_version = version

    def _encode(self, prompt: str | list[dict]) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenizer(prompt)["input_ids"]
        return list(self.tokenizer.apply_chat_template(prompt, add_generation_prompt=True))

    def __call__(self, inputs: dict[str, pa.Table], ctx: NodeContext) -> pa.Table:
        from operators.rollout.sampling import SamplingParams

        prompts = inputs["prompts"]
        prompt_ids = [self._encode(p) for p in prompts["prompt"].to_pylist()]
        params = SamplingParams(
            n=self.p.n,
            temperature=self.p.temperature,
            top_p=self.p.top_p,
            top_k=self.p.top_k,
            max_new_tokens=self.p.max_new_tokens,
            stop=tuple(self.p.stop),
            stop_token_ids=tuple(self.p.stop_token_ids),
            seed=int(np.random.SeedSequence([ctx.seed, ctx.iteration]).generate_state(1)[0]),
        )
        groups = self.engine.generate(prompt_ids, params)
        done = [c for group in groups for c in group]
        n, rows = self.p.n, prompts.num_rows
        table = prompts.take(np.repeat(np.arange(rows), n))
        ids = pa.list_(pa.int32())
        new = {
            "sample_idx": pa.array(np.tile(np.arange(n), rows), pa.int32()),
            "response": pa.array([c.text for c in done], pa.string()),
            "prompt_ids": pa.array([p for p in prompt_ids for _ in range(n)], ids),
            "response_ids": pa.array([c.token_ids for c in done], ids),
            "response_logprobs": pa.array([c.logprobs for c in done], pa.list_(pa.float32())),
            "finish_reason": pa.array([c.finish_reason for c in done], pa.string()),
            "policy_version": pa.array([self.policy_version] * len(done), pa.int64()),
        }
        for name, values in new.items():
            table = table.append_column(name, values)
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
    description="Sampling with the torch engine over an HF causal LM (n per prompt, logprobs).",
)
