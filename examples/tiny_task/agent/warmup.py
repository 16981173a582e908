"""The warm-up of the tiny agent tasks: teacher forcing on synthetic episodes, token in /
token out.

Each episode is rendered with ``operators.generate.agent.render.ConversationTokens``, the class
``agent_loop`` renders rollouts with: the prompt's ids, every assistant turn as the ids the
model would have sampled (its text, then EOS), every observation as the ids the template adds.
The loss is on the assistant turns only; digit targets are smoothed towards uniform
(each synthetic assistant message says by how much), so the policy learns where digits go
and only as much of which as the task wants taught.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from examples.tiny_task.agent.params import AgentTaskParams, AgentWarmupParams, LookupTaskParams
from examples.tiny_task.agent.problems import AgentProblem, guess_episode, lookup_episode
from examples.tiny_task.warmup import IGNORE_INDEX, padded_batch, train_on_batch
from operators.generate.agent.environment import Message
from operators.generate.agent.render import ConversationTokens


def episode_row(
    tokenizer: PreTrainedTokenizerBase, prompt: str, messages: Sequence[Message]
) -> tuple[list[int], list[int], list[float]]:
    """(ids, labels, smoothing) of one episode: labels on the assistant turns' ids, EOS
    included, with their message's ``smoothing``; what the template adds after a turn
    ("glue") goes in with the next observation, as in the loop."""
    convo = ConversationTokens(tokenizer, [{"role": "user", "content": prompt}])
    ids = list(convo.prompt_ids)
    labels = [IGNORE_INDEX] * len(ids)
    smoothing = [0.0] * len(ids)
    sampled: list[int] = []
    for message in messages:
        if message["role"] == "assistant":
            text = message["content"]
            sampled = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
            convo.add_assistant(text)
            ids += sampled
            labels += sampled
            smoothing += [message.get("smoothing", 0.0)] * len(sampled)
        else:
            observed = convo.add_observation([message], sampled)  # the glue, then the message
            ids += observed
            labels += [IGNORE_INDEX] * len(observed)
            smoothing += [0.0] * len(observed)
    return ids, labels, smoothing


def warm_up_episodes(
    task: AgentTaskParams, problems: Sequence[AgentProblem], warmup: AgentWarmupParams
) -> list[tuple[str, list[Message]]]:
    """``warmup.episodes`` (prompt, messages) pairs of seeded random problems."""
    rng = random.Random(warmup.seed)
    chosen = [rng.choice(problems) for _ in range(warmup.episodes)]
    if isinstance(task, LookupTaskParams):
        smooth = (task.keys, task.key_smoothing, task.answer_smoothing)
        return [(p.prompt, lookup_episode(p, *smooth)) for p in chosen]
    game = (task.low, task.high, task.max_guesses, task.guess_smoothing)
    return [(p.prompt, guess_episode(rng, int(p.ground_truth), *game)) for p in chosen]


def warm_up(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: Sequence[AgentProblem],
    params: AgentWarmupParams,
    task: AgentTaskParams,
) -> list[float]:
    """Trains ``model`` in place on synthetic episodes; returns the loss of every step."""
    rows = [episode_row(tokenizer, *e) for e in warm_up_episodes(task, problems, params)]
    batch = padded_batch([(ids, labels) for ids, labels, _ in rows], tokenizer.pad_token_id)
    width = batch["labels"].shape[1]
    batch["smoothing"] = torch.tensor([s + [0.0] * (width - len(s)) for _, _, s in rows])
    return train_on_batch(model, batch, tokenizer, params)
