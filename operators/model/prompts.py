"""Prompts to token ids: plain text, or chat messages rendered by the tokenizer's chat
template (veRL-format datasets hold `prompt` as messages), and how much of a prompt the
tokenizer could not represent.

`apply_chat_template` returns a `BatchEncoding` mapping in transformers 5 (a list of ids in
4.x); `encode_prompt` always returns the list of ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Prompt = str | Sequence[Mapping[str, Any]]
MOSTLY_UNKNOWN = 0.5  # a prompt is "mostly unknown" when over half its characters are lost


def chat_messages(prompt: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages as plain dicts without the null fields Arrow gives structs' missing keys."""
    return [{k: v for k, v in dict(m).items() if v is not None} for m in prompt]


def _ids(value: Any) -> list[int]:
    if isinstance(value, Mapping):  # transformers 5: BatchEncoding
        value = value["input_ids"]
    ids = list(value)
    if ids and isinstance(ids[0], list):  # a batch of one conversation
        ids = ids[0]
    return [int(i) for i in ids]


def prompt_text(tokenizer: Any, prompt: Prompt) -> str:
    """The text the model sees: the prompt itself, or the rendered chat template."""
    if isinstance(prompt, str):
        return prompt
    return tokenizer.apply_chat_template(
        chat_messages(prompt), add_generation_prompt=True, tokenize=False
    )


def encode_prompt(tokenizer: Any, prompt: Prompt) -> list[int]:
    """Token ids of a prompt: text through the tokenizer, messages through its chat template
    with the generation prompt appended."""
    if isinstance(prompt, str):
        return _ids(tokenizer(prompt))
    return _ids(
        tokenizer.apply_chat_template(
            chat_messages(prompt), add_generation_prompt=True, tokenize=True
        )
    )


def render_chat(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    generation: bool = True,
) -> list[int]:
    """Token ids of chat ``messages`` through the chat template (``tools=`` listed by it),
    with the generation prompt appended when ``generation``."""
    return _ids(
        tokenizer.apply_chat_template(
            list(messages), tools=tools, add_generation_prompt=generation, tokenize=True
        )
    )


def lost_fraction(tokenizer: Any, text: str, ids: Sequence[int]) -> float:
    """Share of `text`'s non-space characters that do not come back from its ids: unknown
    tokens and characters the tokenizer dropped (0 for a byte-level BPE)."""
    wanted = sum(not c.isspace() for c in text)
    if wanted == 0:
        return 0.0
    unknown = getattr(tokenizer, "unk_token_id", None)
    decoded = tokenizer.decode([i for i in ids if i != unknown])  # template tokens kept
    kept = sum(not c.isspace() for c in decoded)
    return max(0.0, 1.0 - kept / wanted)
