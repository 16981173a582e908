"""A conversation's token ids, rendered turn by turn with the policy's chat template.

Token in / token out: the ids only ever grow. The model's turn keeps the exact sampled ids;
the environment's answer is what the template adds after that turn, rendered incrementally:
``template(first messages + the model's last turn + new messages) - template(first
messages)``, so a turn costs one render of a few messages however long the episode is. What
the template puts after the sampled ids (``<|im_end|>``'s newline, say) is added as
environment tokens ("glue"). Each render is checked to extend the first messages' tokens (a
template that rewrites earlier turns raises ``TemplateError``); that rendering a turn after
the first messages alone gives what it gives after the whole conversation is checked on a
sample conversation before compute (``template_check.py``). Nothing is ever re-tokenised from
the final text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from operators.generate.agent.environment import Message
from operators.model.prompts import render_chat
from rldag import RunError


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
        self.head: list[Message] = list(messages)  # every turn is rendered after these
        self.messages: list[Message] = list(messages)
        self.prompt_ids = render_chat(tokenizer, self.head, tools=self.tools)
        self._specials = set(getattr(tokenizer, "all_special_ids", ()))

    def add_assistant(self, text: str) -> None:
        """Append the model's turn (``text``, decoded from its sampled ids)."""
        self.messages.append({"role": "assistant", "content": text})

    def add_observation(self, messages: list[Message], sampled: list[int]) -> list[int]:
        """Append environment messages after the model's last turn (``sampled``, appended as
        is); returns the ids that follow the sampled ones: the template's close of the turn,
        the messages and the next generation prompt."""
        turn = self.messages[-1]
        if turn["role"] != "assistant":
            raise ValueError("add_observation answers a model turn: call add_assistant first")
        rendered = render_chat(self.tokenizer, [*self.head, turn, *messages], tools=self.tools)
        what = f"the assistant's turn and {len(messages)} environment message(s)"
        ids = _extension(self.prompt_ids, rendered, what)
        self.messages.extend(messages)
        if ids[: len(sampled)] == sampled:
            return ids[len(sampled) :]
        stopped = sampled[:-1] if sampled and sampled[-1] in self._specials else None
        if stopped is not None and ids[: len(stopped)] == stopped:
            return ids[len(stopped) :]  # its stop token is not the template's close: both stay
        return self._after_content(ids, turn["content"])

    def _after_content(self, ids: list[int], content: str) -> list[int]:
        """The template's ids after the turn's content (the model sampled ids its tokenizer
        would not produce for the same text): the tail of ``ids`` that follows the shortest
        head decoding to the content. TemplateError when no head does: the template's ids
        merge the turn's text with what follows it, so no ids of the environment's alone
        exist."""
        tok = self.tokenizer
        target = tok.decode(tok.encode(content, add_special_tokens=False))
        for m in range(len(ids) + 1):
            if tok.decode(ids[:m], skip_special_tokens=True).endswith(target):
                return ids[m:]
        raise TemplateError(
            f"the chat template's tokens merge the model's turn {content[-40:]!r} with what "
            f"follows it: no tokens of the environment's answer alone"
        )
