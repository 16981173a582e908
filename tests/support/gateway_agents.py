"""Agents for the agent_gateway tests, referenced as module:function: one per way an agent
can misbehave, chosen by the task's prompt_id (``by_prompt``)."""

from __future__ import annotations

import asyncio
from typing import Any

from examples.openai_agent.lookup import rollout as lookup

ASK = [{"role": "user", "content": "lookup 3"}]


async def raises(client: Any, task: dict[str, Any]) -> float:
    await client.chat.completions.create(model="policy", messages=ASK)
    raise ValueError("the agent's own bug")


async def hangs(client: Any, task: dict[str, Any]) -> float:
    await client.chat.completions.create(model="policy", messages=ASK)
    await asyncio.sleep(3600)
    return 1.0


async def garbage(client: Any, task: dict[str, Any]) -> Any:
    await client.chat.completions.create(model="policy", messages=ASK)
    return "a string, not a reward"


async def malformed(client: Any, task: dict[str, Any]) -> float:
    """Sends a message without a role: the gateway's 400 makes the SDK raise."""
    await client.chat.completions.create(model="policy", messages=[{"content": "hi"}])
    return 1.0


async def silent(client: Any, task: dict[str, Any]) -> float:
    """Never asks the model: no trajectory to train on."""
    return 1.0


BY_PROMPT = {0: lookup, 1: raises, 2: hangs, 3: garbage, 4: malformed, 5: silent}


async def by_prompt(client: Any, task: dict[str, Any]) -> Any:
    """The agent ``BY_PROMPT`` names for the task's prompt_id (the lookup agent otherwise)."""
    return await BY_PROMPT.get(task["prompt_id"], lookup)(client, task)


def not_async(client: Any, task: dict[str, Any]) -> float:
    return 1.0


async def over_http(client: Any, task: dict[str, Any]) -> Any:
    """The lookup agent on a client of its own: real HTTP to the session's base URL."""
    import openai

    async with openai.AsyncOpenAI(
        base_url=str(client.base_url), api_key=client.api_key, max_retries=0
    ) as own:
        return await lookup(own, task)


async def both_clients_at_once(client: Any, task: dict[str, Any]) -> float:
    """Two requests of one session at the same moment, one on the handed client and one on
    a client of its own over HTTP; 1.0 when both are answered."""
    import openai

    async with openai.AsyncOpenAI(
        base_url=str(client.base_url), api_key=client.api_key, max_retries=0
    ) as own:
        await asyncio.gather(
            *(c.chat.completions.create(model="policy", messages=ASK) for c in (client, own))
        )
    return 1.0
