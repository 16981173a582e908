"""The long-CoT task's tokenizer: the addition task's word-level tokenizer (every digit and
every ``+ = ;`` one token; the concatenating chat template) with room for 256-token answers."""

from __future__ import annotations

from collections.abc import Iterable

from transformers import PreTrainedTokenizerFast

from examples.tiny_task.tokenizer import train_tokenizer

MODEL_MAX_LENGTH = 320


def train_long_cot_tokenizer(corpus: Iterable[str]) -> PreTrainedTokenizerFast:
    """Trains the word-level tokenizer on ``corpus``, its maximum length the model's context."""
    tokenizer = train_tokenizer(corpus)
    tokenizer.model_max_length = MODEL_MAX_LENGTH
    return tokenizer
