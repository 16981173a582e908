"""Turn-by-turn rendering through the chat template: ids only ever extend."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from operators.generate.agent.render import ConversationTokens, TemplateError
from tests.support.agent_envs import FORGETFUL_TEMPLATE, build_chat_model


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return AutoTokenizer.from_pretrained(build_chat_model(tmp_path_factory.mktemp("chat")))


def template(tok, messages, generation, tools=None):
    return tok.apply_chat_template(
        messages, tools=tools, add_generation_prompt=generation, tokenize=True
    )["input_ids"]


def test_observation_ids_are_the_templates_extension(tokenizer):
    user = [{"role": "user", "content": "2+2?"}]
    convo = ConversationTokens(tokenizer, user)
    assert convo.prompt_ids == template(tokenizer, user, True)
    sampled = tokenizer.encode("ok", add_special_tokens=False) + [tokenizer.eos_token_id]
    convo.add_assistant("ok")
    tool = [{"role": "tool", "name": "calc", "content": "4"}]
    ids = convo.add_observation(tool, sampled)
    before = template(tokenizer, [*user, {"role": "assistant", "content": "ok"}], False)
    after = template(tokenizer, [*user, {"role": "assistant", "content": "ok"}, *tool], True)
    assert ids == after[len(before) - 1 :]  # the sampled <|im_end|>, then the template's
    assert tokenizer.decode(ids) == (  # "\n" after <|im_end|>, then the tool's turn
        "\n<|im_start|>user\n<tool_response>4</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def test_turn_by_turn_ids_are_the_whole_conversations_rendering(tokenizer):
    """Each turn is rendered after the first messages alone; over three turns the prompt, the
    sampled ids and the environment's ids are exactly the whole conversation's tokens."""
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "12+3="}]
    convo = ConversationTokens(tokenizer, messages)
    ids = list(convo.prompt_ids)
    for turn, answer in enumerate(["15", "tool_response", "3"]):
        sampled = tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]
        convo.add_assistant(answer)
        observation = [{"role": "tool" if turn % 2 else "user", "content": f"{turn}+1="}]
        ids += sampled + convo.add_observation(observation, sampled)
        messages += [{"role": "assistant", "content": answer}, *observation]
        assert ids == template(tokenizer, messages, True)
    assert convo.messages == messages
    with pytest.raises(ValueError, match="call add_assistant first"):
        convo.add_observation([{"role": "user", "content": "1"}], [])


def test_a_turn_the_template_would_tokenise_differently_keeps_the_sampled_ids(tokenizer):
    convo = ConversationTokens(tokenizer, [{"role": "user", "content": "hi"}])
    letters = [tokenizer.convert_tokens_to_ids(c) for c in "user"]  # not the merged "user"
    assert letters != tokenizer.encode("user", add_special_tokens=False)
    convo.add_assistant("user")  # stopped without <|im_end|>
    ids = convo.add_observation([{"role": "user", "content": "1"}], letters)
    assert (
        tokenizer.decode(ids)
        == "<|im_end|>\n<|im_start|>user\n1<|im_end|>\n<|im_start|>assistant\n"
    )


def test_tools_are_rendered_into_the_prompt(tokenizer):
    schema = {"type": "function", "function": {"name": "calc", "parameters": {}}}
    convo = ConversationTokens(tokenizer, [{"role": "user", "content": "hi"}], [schema])
    assert tokenizer.decode(convo.prompt_ids).startswith("<|im_start|>system\ntools: calc")


def test_a_template_that_rewrites_earlier_turns_is_refused(tokenizer):
    tokenizer.chat_template = FORGETFUL_TEMPLATE
    convo = ConversationTokens(
        tokenizer, [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    )
    convo.add_assistant("ok")
    with pytest.raises(TemplateError, match="not prefix-preserving"):
        convo.add_observation([{"role": "user", "content": "1"}], [tokenizer.eos_token_id])
