"""The tokenisation contract of multi-turn rollouts, checked before compute.

An agent episode is token in / token out: the ids the model was prompted with stay, its sampled
ids are appended, then the ids of the environment's answer. That is only the conversation the
chat template renders if rendering turn t+1 extends the tokens of turn t. A template that
rewrites earlier turns (Qwen3-style templates strip the ``<think>`` reasoning of earlier
assistant turns) breaks it silently at run time; `check_chat_template` renders a sample
conversation (system, user, assistant with a tool call, tool result, assistant) one turn at a
time and refuses such a template, naming the turn and the first token that changed. Episodes
render each environment answer after the conversation's first messages and the model's last
turn only (``render.py``); the check also refuses a template for which that differs from
rendering the whole conversation (one that numbers its turns, say).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from operators.generate.agent.environment import Message
from operators.generate.agent.factory import load_tools
from operators.generate.agent.render import ConversationTokens, TemplateError, first_difference
from operators.generate.agent.tools import tool_schema
from operators.model.prompts import render_chat
from operators.model.tokenizer_checks import (
    require_chat_template,
    require_tools_rendered,
    tokenizer_of,
)
from rldag import InputError

Schema = Mapping[str, Any]  # an OpenAI-style tool schema {"type": "function", "function": ...}

# The tool the sample conversation calls when the operator lists none.
DEFAULT_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "python",
        "description": "Run Python code and return what it prints.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "the program"}},
            "required": ["code"],
        },
    },
}
_PLACEHOLDERS = {"string": "37+58", "integer": 37, "number": 37.5, "boolean": True}


def _sample_arguments(schema: Schema) -> dict[str, Any]:
    """Arguments for a call of the tool `schema` describes: a placeholder per property."""
    properties = schema.get("function", {}).get("parameters", {}).get("properties", {})
    return {name: _PLACEHOLDERS.get(p.get("type"), "37") for name, p in properties.items()}


def sample_conversation(tools: Sequence[Schema] = ()) -> list[Message]:
    """System, user, assistant (reasoning and a hermes tool call of the first tool), the
    tool's result, an assistant answer, a user follow-up (environments answer as users) and
    the last answer. Digits everywhere, so even a tokenizer that
    knows only digits (the tiny one) sees every turn's content."""
    tool = tools[0] if tools else DEFAULT_TOOL
    name = tool["function"]["name"]
    arguments = _sample_arguments(tool)
    call = json.dumps({"name": name, "arguments": arguments})
    return [
        {"role": "system", "content": "You can call tools. 1+1=2"},
        {"role": "user", "content": "37+58="},
        {
            "role": "assistant",
            "content": f"<think>58+37 is 95</think><tool_call>{call}</tool_call>",
        },  # as the agent loop renders a turn: the sampled text, calls included
        {"role": "tool", "name": name, "content": "95"},
        {"role": "assistant", "content": "<think>the tool says 95</think>95"},
        {"role": "user", "content": "95+1="},  # feedback as a user turn (environments)
        {"role": "assistant", "content": "<think>95+1 is 96</think>96"},
    ]


def _snippet(tokenizer: Any, ids: Sequence[int]) -> str:
    text = tokenizer.decode(list(ids[:12]))
    return repr(text if len(ids) <= 12 else text + "…")


def check_chat_template(
    tokenizer: Any,
    tools: Sequence[Schema] | None = None,
    messages: list[Message] | None = None,
    *,
    key: str = "model_path",
) -> None:
    """Raise InputError (at `key`) unless each turn of `messages` (default: the sample
    conversation calling the first of `tools`) extends the previous turn's tokens.

    Turn k is rendered as the agent loop renders it: messages 1..k, with the generation prompt
    when the model speaks next; the prompt is messages up to the first user message. Then
    the turns are rendered incrementally, as episodes do, and must give the same tokens."""
    tools = list(tools) if tools else None
    messages = messages or sample_conversation(tools or ())
    require_chat_template(tokenizer, "multi-turn needs one", key)
    first = next(i for i, m in enumerate(messages) if m["role"] == "user") + 1
    previous: list[int] | None = None
    for k in range(first, len(messages) + 1):
        speaks_next = k < len(messages) and messages[k]["role"] == "assistant"
        try:
            ids = render_chat(tokenizer, messages[:k], tools=tools, generation=speaks_next)
        except Exception as err:  # jinja errors, missing roles: say which turn
            raise InputError(
                f"the chat template fails to render turn {k} ({messages[k - 1]['role']}): "
                f"{type(err).__name__}: {err}",
                path=key,
            ) from None
        at = None if previous is None else first_difference(previous, ids)
        if at is not None:
            raise InputError(
                f"the chat template is not prefix-preserving: rendering turn {k} "
                f"({messages[k - 1]['role']}) changes the tokens of turns 1-{k - 1} from token "
                f"{at} on ({_snippet(tokenizer, previous[at:])} became "
                f"{_snippet(tokenizer, ids[at:])}); token in / token out needs every turn to "
                "extend the previous one as it was rendered (templates that strip earlier "
                "reasoning do this): use a template that keeps earlier turns unchanged",
                path=key,
            )
        previous = ids
    _check_incremental(tokenizer, tools, messages, first, key)


def _check_incremental(
    tokenizer: Any, tools: list | None, messages: list[Message], first: int, key: str
) -> None:
    """InputError unless ``ConversationTokens`` (each environment answer rendered after the
    first messages and the model's last turn) gives what rendering the whole conversation
    gives, the model's turns taken as the template renders them."""
    convo = ConversationTokens(tokenizer, messages[:first], tools)
    ids, k = list(convo.prompt_ids), first
    while k < len(messages) and messages[k]["role"] == "assistant":
        j = next((i for i in range(k + 1, len(messages)) if messages[i]["role"] == "assistant"),
                 len(messages))  # fmt: skip
        if j == k + 1:
            return
        sampled = render_chat(tokenizer, messages[: k + 1], tools=tools, generation=False)
        sampled = sampled[len(ids) :]
        convo.add_assistant(messages[k]["content"])
        try:
            ids += sampled + convo.add_observation(list(messages[k + 1 : j]), sampled)
        except TemplateError as err:
            raise InputError(str(err), path=key) from None
        whole = render_chat(tokenizer, messages[:j], tools=tools, generation=True)
        if ids != whole:
            at = first_difference(ids, whole)
            at = min(len(ids), len(whole)) if at is None else at
            raise InputError(
                f"the chat template renders turn {j} ({messages[j - 1]['role']}) differently "
                f"after the whole conversation than after its first messages and the previous "
                f"turn alone (from token {at}: {_snippet(tokenizer, whole[at:])} vs "
                f"{_snippet(tokenizer, ids[at:])}); episodes render each turn after those "
                "alone: use a template whose turns depend only on them (not on turn numbers)",
                path=key,
            )
        k = j


def check_model_template(
    model_path: str, tools: Sequence[Schema] | None = None, *, tools_in_template: bool = False
) -> None:
    """`check_chat_template` with the tokenizer of `model_path` (``from_pretrained``); with
    `tools_in_template`, also that the template renders `tools`."""
    tokenizer = tokenizer_of(model_path)
    check_chat_template(tokenizer, tools)
    if tools and tools_in_template:
        prompt = sample_conversation(tools)[:2]  # the system and user turns
        require_tools_rendered(tokenizer, tools, prompt, key="tools")


def check_agent_template(params: Any) -> None:
    """The preflight of a multi-turn operator whose params have ``model_path`` and ``tools``
    (a tool environment: their schemas go to the template; otherwise the sample calls a
    ``python`` tool)."""
    tools = load_tools(params) if getattr(params, "tools", None) else []
    schemas = [tool_schema(t) for t in tools] or None
    check_model_template(
        params.model_path, schemas, tools_in_template=getattr(params, "tools_in_template", True)
    )
