"""`reward_model` score operator: a frozen Hugging Face sequence-classification model (one
label) scores prompt + response on the node's pool.

Rows are tokenised as the model reads them (a string prompt + the response; chat messages +
an assistant turn through the model's chat template), cut into token-budget micro-batches by
length (`plan_sequences`: a long row does not pad the short ones) and scored in inference
mode. The raw score is kept in `reward_info` (``{"rm_score": ...}``); `reward` is it after the
node's normalisation. A row over `max_length` tokens or with a non-finite score is an error
row, handled by `on_error` like a reward function's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import pyarrow as pa
from omegaconf import MISSING

from operators.model.prompts import chat_messages
from operators.score.reward_call import RewardOutcome
from operators.score.reward_function import OnError, scored_table
from operators.train.micro_batches import plan_sequences
from rldag import InputError, NodeContext, NodeKind, OperatorDef, Port, check_positive, col, columns


class Normalize(StrEnum):
    """How a reward model's raw score becomes `reward`."""

    none = "none"  # the raw score
    sigmoid = "sigmoid"  # 1 / (1 + exp(-score)): a probability-like reward in (0, 1)
    running = "running"  # (score - mean) / std over every row this node has scored so far


class Dtype(StrEnum):
    """The reward model's weights and activations."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


@dataclass
class RewardModelParams:
    """Parameters of the `reward_model` score operator."""

    model_path: str = MISSING  # an HF sequence-classification directory (num_labels: 1)
    micro_batch_tokens: int = 8192  # padded tokens per forward (0: the whole table at once)
    micro_batch_size: int = 0  # rows per forward (0: no limit)
    max_length: int = 0  # rows longer than this many tokens are errors (0: no limit)
    normalize: Normalize = Normalize.none  # none | sigmoid | running
    clip: float = 0.0  # |reward| <= clip after normalising (0: no clip)
    eps: float = 1e-6  # running: added to the std
    device: str = "cpu"
    dtype: Dtype = Dtype.float32
    on_error: OnError = OnError.fail  # fail | zero | drop

    def __post_init__(self) -> None:
        for key in ("micro_batch_tokens", "micro_batch_size", "max_length", "clip"):
            check_positive(key, getattr(self, key), allow_zero=True)
        check_positive("eps", self.eps)


class RunningMoments:
    """Mean and variance of every value seen so far (Chan et al.'s parallel update)."""

    def __init__(self) -> None:
        self.count, self.mean, self.m2 = 0, 0.0, 0.0

    def update(self, values: np.ndarray) -> None:
        n = len(values)
        if n == 0:
            return
        mean, m2 = float(values.mean()), float(((values - values.mean()) ** 2).sum())
        total = self.count + n
        delta = mean - self.mean
        self.m2 += m2 + delta**2 * self.count * n / total
        self.mean += delta * n / total
        self.count = total

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / self.count) if self.count else 0.0


def normalized(raw: np.ndarray, how: Normalize, moments: RunningMoments, eps: float) -> np.ndarray:
    """`raw` scores as rewards (`running` first adds them to `moments`)."""
    if how == Normalize.sigmoid:
        return 1.0 / (1.0 + np.exp(-raw))
    if how == Normalize.running:
        moments.update(raw[np.isfinite(raw)])
        return (raw - moments.mean) / (moments.std + eps)
    return raw


def rm_text(tokenizer: Any, prompt: str | list, response: str) -> str:
    """What the reward model reads: prompt + response, or the conversation with the response
    as the assistant's turn rendered by its chat template."""
    if isinstance(prompt, str):
        return prompt + response
    turns = [*chat_messages(prompt), {"role": "assistant", "content": response}]
    return tokenizer.apply_chat_template(turns, tokenize=False)


class RewardModelScorer:
    """Scores rows with a frozen sequence classifier; adds `reward`, `reward_info`,
    `reward_error`."""

    def __init__(self, params: RewardModelParams) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification
        from transformers.utils import logging as hf_logging

        from operators.model.hf import load_tokenizer, loading

        hf_logging.disable_progress_bar()
        self.p = params
        self.tokenizer = load_tokenizer(params.model_path)
        with loading(params.model_path, "reward model"):
            self.model = AutoModelForSequenceClassification.from_pretrained(
                params.model_path, dtype=getattr(torch, params.dtype.value)
            ).to(params.device)
        self.model.eval()
        labels = self.model.config.num_labels
        if labels != 1:
            raise InputError(
                f"{params.model_path} has num_labels={labels}; a reward model has one label",
                path="model_path",
            )
        self.pad_id = self.model.config.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.pad_token_id or self.tokenizer.eos_token_id
            self.model.config.pad_token_id = self.pad_id
        self.moments = RunningMoments()
        self.forwards = 0  # micro-batches run (for bench/)

    def raw_scores(self, texts: list[str]) -> tuple[np.ndarray, list[int]]:
        """The model's score of each text (NaN for texts over `max_length`) and their token
        counts, in token-budget micro-batches."""
        import torch

        ids = [self.tokenizer(t, add_special_tokens=True)["input_ids"] for t in texts]
        lengths = np.array([len(i) for i in ids])
        keep = np.flatnonzero(lengths <= self.p.max_length) if self.p.max_length else None
        rows = np.arange(len(ids)) if keep is None else keep
        out = np.full(len(ids), np.nan)
        plan = plan_sequences(lengths[rows], self.p.micro_batch_tokens, self.p.micro_batch_size)
        with torch.inference_mode():
            for micro in plan:
                index = rows[micro]
                width = int(lengths[index].max())
                batch = torch.full((len(index), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros_like(batch)
                for k, row in enumerate(index):
                    batch[k, : lengths[row]] = torch.tensor(ids[row])
                    mask[k, : lengths[row]] = 1
                logits = self.model(
                    input_ids=batch.to(self.p.device), attention_mask=mask.to(self.p.device)
                ).logits
                out[index] = logits[:, 0].float().cpu().numpy()
                self.forwards += 1
        return out, lengths.tolist()

    def _outcome(self, raw: float, reward: float, length: int) -> RewardOutcome:
        if math.isnan(raw) and self.p.max_length and length > self.p.max_length:
            return RewardOutcome(error=f"is {length} tokens, over max_length {self.p.max_length}")
        if not math.isfinite(raw):
            return RewardOutcome(error=f"scored {raw} (expected a finite number)")
        if self.p.clip:
            reward = min(max(reward, -self.p.clip), self.p.clip)
        return RewardOutcome(reward, json.dumps({"rm_score": raw}))

    def __call__(self, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> pa.Table:
        table = inputs["rollouts"]
        texts = [
            rm_text(self.tokenizer, p, r)
            for p, r in zip(table["prompt"].to_pylist(), table["response"].to_pylist(), strict=True)
        ]
        raw, lengths = self.raw_scores(texts)
        rewards = normalized(raw, self.p.normalize, self.moments, self.p.eps)
        outcomes = [
            self._outcome(float(r), float(w), n)
            for r, w, n in zip(raw, rewards, lengths, strict=True)
        ]
        return scored_table(
            table, outcomes, self.p.on_error, ctx, f"reward model {self.p.model_path}"
        )


REWARD_MODEL = OperatorDef(
    name="reward_model",
    kind=NodeKind.score,
    factory=RewardModelScorer,
    ports=(Port("rollouts", columns("prompt", "response")),),
    adds=(col("reward"), col("reward_info"), col("reward_error", pa.string())),
    params=RewardModelParams,
    stateful=True,
    streams=True,
    description="A frozen sequence-classification reward model scores prompt + response.",
)
