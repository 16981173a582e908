"""How the warmed-up agent policy starts (recorded in ``build.json``): its first turns
sampled from the prompts, as an RL rollout at the same temperature sees them."""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from examples.tiny_task.agent.problems import AgentProblem
from examples.tiny_task.evaluate import sample_responses
from operators.generate.agent.parsers import hermes

EVAL_PROBLEMS = 100  # the first problems' first turns are sampled


def rendered_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str) -> str:
    """The prompt as the chat template opens the model's first turn (``agent_loop``'s)."""
    message = [{"role": "user", "content": prompt}]
    return tokenizer.apply_chat_template(message, tokenize=False, add_generation_prompt=True)


def first_turns(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: Sequence[AgentProblem],
    samples_per_problem: int,
    temperature: float,
    max_new_tokens: int,
    seed: int,
) -> list[tuple[AgentProblem, str]]:
    """(problem, sampled first turn) pairs, with a seeded generator."""
    was_training = model.training
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    chosen = [p for p in problems[:EVAL_PROBLEMS] for _ in range(samples_per_problem)]
    texts = sample_responses(
        model,
        tokenizer,
        [rendered_prompt(tokenizer, p.prompt) for p in chosen],
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        generator=generator,
    )
    model.train(was_training)
    return list(zip(chosen, texts, strict=True))


def evaluate_guess(model, tokenizer, problems, **sampling) -> dict[str, float]:
    """``format_rate``: first turns that are one digit then EOS; ``first_hit_rate``: first
    guesses that are the secret."""
    turns = first_turns(model, tokenizer, problems, **sampling)
    one_digit = re.compile(r"([0-9])" + re.escape(tokenizer.eos_token))
    found = [(p, one_digit.fullmatch(t)) for p, t in turns]
    return {
        "format_rate": sum(m is not None for _, m in found) / len(found),
        "first_hit_rate": sum(m is not None and m.group(1) == p.ground_truth for p, m in found)
        / len(found),
    }


def evaluate_lookup(model, tokenizer, problems, **sampling) -> dict[str, float]:
    """``call_rate``: first turns that are one well-formed ``lookup`` call; ``key_rate``:
    calls that ask for the prompt's key."""
    turns = first_turns(model, tokenizer, problems, **sampling)
    calls = [(p, hermes(t.replace(tokenizer.eos_token, "")).tool_calls) for p, t in turns]
    good = [(p, c[0]) for p, c in calls if len(c) == 1 and c[0].name == "lookup"]
    return {
        "call_rate": len(good) / len(turns),
        "key_rate": sum(c.arguments.get("key") == p.key for p, c in good) / len(turns),
    }
