"""A tool-calling agent for the lookup task, written as any OpenAI-SDK agent is
(examples/agent_gateway.yaml runs it with the `agent_gateway` node).

The agent owns its loop and its tool: it asks the model, runs the `lookup` calls the model
makes against the episode's own table of facts, sends the results back, and scores the final
answer. Nothing here knows about tokens, log-probs or training: the gateway behind ``client``
records them.
"""

from __future__ import annotations

import json
from typing import Any

from openai import AsyncOpenAI

from examples.tiny_task.agent.problems import episode_facts

KEYS = 10  # the keys of each episode's table (the task's build)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look up the fact stored under a key.",
            "parameters": {
                "type": "object",
                "properties": {"key": {"type": "integer", "description": "the key, one digit"}},
                "required": ["key"],
            },
        },
    }
]


def lookup(facts: list[int], arguments: str) -> str:
    """The tool: the fact under the call's key, or what went wrong."""
    try:
        return str(facts[int(json.loads(arguments)["key"])])
    except (ValueError, KeyError, IndexError, TypeError) as err:
        return f"error: {err!r}"


async def rollout(client: AsyncOpenAI, task: dict[str, Any]) -> dict[str, Any]:
    """Ask, run the model's tool calls, ask again; the reward is 1 for the right digit."""
    facts = episode_facts(task["dataset_index"], KEYS)
    messages: list[Any] = [{"role": "user", "content": task["prompt"]}]
    calls = 0
    for _ in range(2):
        response = await client.chat.completions.create(
            model="policy", messages=messages, tools=TOOLS, max_tokens=24
        )
        message = response.choices[0].message
        messages.append(message)
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            calls += 1
            result = lookup(facts, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    answer = (message.content or "").strip()
    return {"reward": float(answer == task["ground_truth"]), "tool_calls": calls}
