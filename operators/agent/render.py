"""A conversation's token ids, rendered turn by turn with the policy's chat template.

Token in / token out: the ids only ever grow. An environment turn's ids are
``template(messages so far + new messages) - template(messages so far)``, checked to be an
extension (a template that rewrites earlier turns, e.g. one that strips earlier reasoning,
raises ``TemplateError``); the model's turn keeps the exact sampled ids, and what the template
puts after them (``<|im_end|>``'s newline, say) is added as environment tokens ("glue").
Nothing is ever re-tokenised from the final text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from operators.agent.environment import Message
from operators.prompts import render_chat
from rldag.errors import RunError


class TemplateError(RunError):
    """The chat template does not extend the previous turn's tokens."""


def first_difference(before: list[int], after: list[int]) -> int | None:
    """Where ``after`` stops extending ``before`` (None when it extends it)."""
    if after[: len(before)] == before:
        return None
    return next(
        (k for k, (a, b) in enumerate(zip(before, after, strict=False)) if a != b),
        min(len(before), len(after)),
    )


def _extension(before: list[int], after: list[int], what: str) -> list[int]:
    """The ids ``after`` adds to ``before``; TemplateError when it is not an extension."""
    same = first_difference(before, after)
    if same is not None:
        raise TemplateError(
            f"the chat template is not prefix-preserving: rendering the conversation with "
            f"{what} changes its earlier tokens from position {same} of {len(before)} on "
            f"(token-in/token-out needs each turn to extend the previous ones)"
        )
    return after[len(before) :]


class ConversationTokens:
    """The rendered conversation of one episode; see the module docstring."""

    def __init__(
        self, tokenizer: Any, messages: Sequence[Message], tools: list[dict] | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self.tools = tools or None
        self.messages: list[Message] = list(messages)
        self.prompt_ids = render_chat(tokenizer, self.messages, tools=self.tools)
        self._open = self.prompt_ids  # the conversation ready for the model's next turn
        self._closed = self.prompt_ids  # ... and after the last message, without that prompt

    def add_assistant(self, text: str, sampled: list[int]) -> list[int]:
        """Append the model's turn (``text`` decoded from ``sampled``); returns the ids the
        template adds after the sampled ones."""
        message: Message = {"role": "assistant", "content": text}
        closed = render_chat(
            self.tokenizer, [*self.messages, message], tools=self.tools, generation=False
        )
        turn = _extension(self._open, closed, "the assistant's turn")
        self.messages.append(message)
        self._closed = closed
        if turn[: len(sampled)] == sampled:
            return turn[len(sampled) :]
        return self._glue_after_content(turn, text)

    def _glue_after_content(self, turn: list[int], content: str) -> list[int]:
        """The template's ids after the turn's content (the model sampled ids its tokenizer
        would not produce for the same text): the tail of ``turn`` that follows the shortest
        head decoding to the content."""
        tok = self.tokenizer
        target = tok.decode(tok.encode(content, add_special_tokens=False))
        for m in range(len(turn) + 1):
            if tok.decode(turn[:m], skip_special_tokens=True).endswith(target):
                return turn[m:]
        return []

    def add_observation(self, messages: list[Message]) -> list[int]:
        """Append environment messages; returns their ids with the next generation prompt."""
        opened = render_chat(self.tokenizer, [*self.messages, *messages], tools=self.tools)
        ids = _extension(self._closed, opened, f"{len(messages)} environment message(s)")
        self.messages.extend(messages)
        self._open = self._closed = opened
        return ids
