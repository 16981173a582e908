"""The gateway's sessions through the real `openai` client over loopback HTTP: exact tokens
stitched into one trajectory, choices, rewrites, budgets, completions, KV reuse across
turns."""

from __future__ import annotations

import asyncio

import openai
import pytest

from examples.openai_agent.lookup import TOOLS
from operators.generate.agent.loop import turn_seed
from operators.model.prompts import render_chat
from operators.rollout.sampling import SamplingParams
from operators.rollout.torch_engine import TorchEngine

ASK = [{"role": "user", "content": "lookup 3"}]


async def two_turns(client: openai.AsyncOpenAI) -> list:
    """Ask, answer the tool call with 7, ask again (both responses with log-probs)."""
    messages: list = list(ASK)
    first = await client.chat.completions.create(
        model="policy", messages=messages, tools=TOOLS, logprobs=True
    )
    message = first.choices[0].message
    messages += [message, {"role": "tool", "tool_call_id": message.tool_calls[0].id,
                           "content": "7"}]  # fmt: skip
    second = await client.chat.completions.create(
        model="policy", messages=messages, tools=TOOLS, logprobs=True
    )
    return [first, second]


def test_a_session_is_one_trajectory_of_exactly_the_sampled_tokens(gateway):
    replay = TorchEngine.from_pretrained(gateway.model)  # the gateway's runs on its own thread
    (first, second), ep = gateway.run(two_turns)
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "lookup"
    assert [t.start for t in ep.turns] == [0, ep.turns[0].end]
    tok = gateway.engine.tokenizer
    for turn, response in zip(ep.turns, (first, second), strict=True):
        sampled = ep.token_ids[turn.start : turn.model_end]
        lps = [e.logprob for e in response.choices[0].logprobs.content]
        assert ep.logprobs[turn.start : turn.model_end] == pytest.approx(lps, abs=1e-6)
        assert ep.mask[turn.start : turn.model_end] == [1] * len(sampled)
        assert ep.mask[turn.model_end : turn.end] == [0] * (turn.end - turn.model_end)
        # the same context and seed give the same ids: they are what the engine sampled
        context = ep.prompt_ids + ep.token_ids[: turn.start]
        seed = turn_seed(7, gateway.last.prompt_id, 0, ep.turns.index(turn))
        params = SamplingParams(max_new_tokens=128 - len(context), seed=seed)
        (again,) = replay.generate([context], params)[0]
        assert again.token_ids == sampled
    # the tool's answer is what the template adds after the sampled turn, nothing re-tokenised
    text = tok.decode(ep.token_ids[: ep.turns[0].model_end], skip_special_tokens=True)
    turn_one = [*ASK, {"role": "assistant", "content": text}, {"role": "tool", "content": "7"}]
    rendered = render_chat(tok, turn_one)
    assert ep.prompt_ids + ep.token_ids[: ep.turns[0].end] == rendered
    assert second.choices[0].message.content == ep.text.strip()
    assert ep.finish_reason == "stop" and [c.name for _, c in ep.calls] == ["lookup"]


def test_turn_two_prefills_only_what_turn_one_and_the_tool_added(gateway):
    before = gateway.engine.batcher.reused_tokens
    _, ep = gateway.run(two_turns)
    reused = gateway.engine.batcher.reused_tokens - before
    assert reused == len(ep.prompt_ids) + ep.turns[0].model_end - 1  # all but the last id
    gateway.sampler.loop.release("none").result(10)  # handled after the session's release
    assert len(gateway.engine.batcher.kept) == 0  # the session's cache went with it


def test_the_trajectory_keeps_the_choice_the_agent_sent_back(gateway):
    async def pick_a_different_one(client):
        call = (await client.chat.completions.create(model="policy", messages=ASK)).choices[0]
        answer = {"role": "tool", "tool_call_id": call.message.tool_calls[0].id, "content": "7"}
        messages = [*ASK, call.message, answer]
        second = await client.chat.completions.create(
            model="policy", messages=messages, n=8, logprobs=True
        )
        texts = [c.message.content for c in second.choices]
        j = next(j for j, t in enumerate(texts) if t != texts[0])  # the policy guesses digits
        kept = [*messages, second.choices[j].message, {"role": "user", "content": "ok"}]
        await client.chat.completions.create(model="policy", messages=kept)
        return second.choices[j]

    kept, ep = gateway.run(pick_a_different_one)
    turn = ep.turns[1]
    lps = [e.logprob for e in kept.logprobs.content]
    assert ep.logprobs[turn.start : turn.model_end] == pytest.approx(lps, abs=1e-6)
    ids = ep.token_ids[turn.start : turn.model_end]
    assert gateway.engine.tokenizer.decode(ids, skip_special_tokens=True) == kept.message.content
    assert len(ep.turns) == 3 and gateway.last.rewrites == 0


def test_a_rewritten_history_splits_the_trajectory_by_default(gateway):
    async def rewrite(client):
        first = await client.chat.completions.create(model="policy", messages=ASK)
        other = [{"role": "user", "content": "lookup 5"}, first.choices[0].message]
        return await client.chat.completions.create(model="policy", messages=[*other, *ASK])

    _, ep = gateway.run(rewrite)
    tok = gateway.engine.tokenizer
    assert tok.decode(ep.prompt_ids).startswith("lookup 5")  # the row keeps the last segment
    assert len(ep.turns) == 1
    assert any("history was rewritten" in e and "messages[0] differs" in e for e in ep.errors)


def test_a_rewritten_history_is_a_400_under_reject(gateway):
    async def rewrite(client):
        await client.chat.completions.create(model="policy", messages=ASK)
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="policy", messages=ASK)
        return caught.value

    err, ep = gateway.run(rewrite, on_rewrite="reject")
    assert err.code == "history_rewritten" and err.body["param"] == "messages"
    assert "2 messages" not in err.message and "the session has 1 and a reply" in err.message
    assert len(ep.turns) == 1 and ep.errors  # the first turn stays, the refusal is recorded


def test_past_the_turn_budget_a_request_gets_an_empty_length_choice(gateway):
    async def loop_forever(client):
        answers = []
        messages: list = list(ASK)
        for _ in range(3):
            out = await client.chat.completions.create(model="policy", messages=messages)
            answers.append(out.choices[0])
            messages += [out.choices[0].message, {"role": "user", "content": "again"}]
        return answers

    answers, ep = gateway.run(loop_forever, max_turns=2)
    assert answers[2].finish_reason == "length" and answers[2].message.content == ""
    assert len(ep.turns) == 2 and ep.finish_reason == "max_turns"


def test_completions_continue_the_session_text_and_models_lists_the_policy(gateway):
    async def text_agent(client):
        models = await client.models.list()
        first = await client.completions.create(model="policy", prompt="lookup 3", logprobs=0)
        prompt = "lookup 3" + first.choices[0].text + "7"
        second = await client.completions.create(model="policy", prompt=prompt)
        return models, first, second

    (models, first, second), ep = gateway.run(text_agent)
    assert [m.id for m in models.data] == ["policy"]
    assert len(ep.turns) == 2
    lps = first.choices[0].logprobs.token_logprobs
    assert ep.logprobs[: ep.turns[0].model_end] == pytest.approx(lps, abs=1e-6)
    tok = gateway.engine.tokenizer
    assert ep.token_ids[ep.turns[0].model_end : ep.turns[0].end] == tok.encode(
        "7", add_special_tokens=False
    )


def test_concurrent_sessions_see_only_their_own_turns(gateway):
    import openai as sdk

    a, b = gateway.open(), gateway.open()

    async def both():
        async def ask(url, text):
            async with sdk.AsyncOpenAI(base_url=url, api_key="test-token", max_retries=0) as c:
                return await c.chat.completions.create(
                    model="policy", messages=[{"role": "user", "content": text}]
                )

        return await asyncio.gather(ask(a.url, "lookup 1"), ask(b.url, "lookup 8"))

    answers = asyncio.run(both())
    episodes = gateway.close_session(a), gateway.close_session(b)
    tok = gateway.engine.tokenizer
    for ep, answer, prompt in zip(episodes, answers, ("lookup 1", "lookup 8"), strict=True):
        assert tok.decode(ep.prompt_ids) == prompt and len(ep.turns) == 1
        call = answer.choices[0].message.tool_calls[0].function  # each got its own answer
        sent = f'<tool_call>{{"name":"{call.name}","arguments":{call.arguments}}}</tool_call>'
        assert tok.decode(ep.token_ids, skip_special_tokens=True) == sent

    async def after_close():
        async with sdk.AsyncOpenAI(base_url=a.url, api_key="test-token", max_retries=0) as c:
            with pytest.raises(sdk.NotFoundError) as caught:
                await c.chat.completions.create(model="policy", messages=ASK)
        return caught.value

    assert asyncio.run(after_close()).code == "session_not_found"
