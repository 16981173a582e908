"""User code for the agent tests: environments, tools and a parser referenced as module:attr,
and a small chat model (character BPE tokenizer with a tool-aware ChatML template) on disk."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from operators.generate.agent.environment import AssistantTurn, StepResult, ToolCall
from tests.support.tiny_models import save_with_random_lm

CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\ntools:"
    "{% for t in tools %} {{ t['function']['name'] }}{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'tool' %}<|im_start|>user\n<tool_response>{{ m['content'] }}"
    "</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Renders only the last two messages: not prefix-preserving.
FORGETFUL_TEMPLATE = (
    "{% for m in messages[-2:] %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_chat_model(path: Path, template: str = CHAT_TEMPLATE, seed: int = 0) -> Path:
    """A random 2-layer Qwen2 model and a byte-level BPE tokenizer (with a few merges)
    whose eos is <|im_end|>, saved as an HF directory."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    raw = Tokenizer(models.BPE(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    specials = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=len(specials) + len(alphabet) + 12,
        special_tokens=specials,
        initial_alphabet=alphabet,
    )
    raw.train_from_iterator(["user assistant system tool_response 12+3=15"] * 4, trainer)
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<pad>", unk_token="<unk>"
    )
    tokenizer.chat_template = template
    return save_with_random_lm(path, tokenizer, seed=seed)


class EchoEnv:
    """Answers every turn with a user message (its turn number) and reward 1; done after
    ``turns`` steps."""

    def __init__(self, turns: int = 3) -> None:
        self.turns = turns
        self.seen = 0

    def reset(self, row: dict) -> list[dict]:
        return [{"role": "user", "content": f"start {row['prompt_id']}"}]

    def step(self, turn: AssistantTurn) -> StepResult:
        self.seen += 1
        done = self.seen >= self.turns
        return StepResult([{"role": "user", "content": f"turn {self.seen}"}], 1.0, done)

    def close(self) -> None:
        pass


class BrokenEnv(EchoEnv):
    """An environment whose ``mode`` (or its row's) is how it fails: raise, hang, garbage,
    nan, reset."""

    def __init__(self, mode: str = "raise") -> None:
        super().__init__(turns=10)
        self.mode = mode

    def reset(self, row: dict) -> list[dict]:
        self.mode = row.get("mode", self.mode)
        if self.mode == "reset":
            raise RuntimeError("cannot start")
        return super().reset(row)

    def step(self, turn: AssistantTurn) -> Any:
        if self.mode == "raise":
            raise ValueError("simulator crashed")
        if self.mode == "hang":
            threading.Event().wait(30)
        if self.mode == "garbage":
            return {"observation": 1}
        if self.mode == "nan":
            return StepResult([], float("nan"))
        return super().step(turn)


class LongEnv(EchoEnv):
    """Observations of ``size`` characters (for max_tool_response_tokens / total budgets)."""

    def __init__(self, size: int = 400) -> None:
        super().__init__(turns=10)
        self.size = size

    def step(self, turn: AssistantTurn) -> StepResult:
        return StepResult([{"role": "user", "content": "a" * self.size + "END"}], 0.5)


def lookup(key: int) -> str:
    """The fact stored under a number.

    Args:
        key: the number to look up
    """
    return f"fact {key % 7}"


def slow_tool(seconds: float) -> str:
    """Sleeps, then answers.

    Args:
        seconds: how long to sleep
    """
    time.sleep(seconds)
    return "slept"


def always_call(text: str) -> AssistantTurn:
    """A parser for models that cannot write hermes: every turn calls ``lookup`` with the
    turn's length (tiny-model tests)."""
    call = ToolCall("lookup", {"key": len(text)}, "call_0")
    return AssistantTurn(text, (call,))


def call_slow(text: str) -> AssistantTurn:
    """Every turn calls ``slow_tool`` for 2 s."""
    return AssistantTurn(text, (ToolCall("slow_tool", {"seconds": 2.0}),))


def call_missing(text: str) -> AssistantTurn:
    """Every turn calls a tool that does not exist."""
    return AssistantTurn(text, (ToolCall("no_such_tool", {}),))


class WhereEnv(BrokenEnv):
    """Reports the process and Ray placement group it runs in (``StepResult.info``); rows with
    ``prompt_id % 4`` 2 raise and 3 hang."""

    def reset(self, row: dict) -> list[dict]:
        self.mode = {2: "raise", 3: "hang"}.get(row["prompt_id"] % 4, "")
        self.turns = 3
        return super().reset(row)

    def step(self, turn: AssistantTurn) -> StepResult:
        import os

        import ray

        result = super().step(turn)
        context = ray.get_runtime_context() if ray.is_initialized() else None
        group = context.get_placement_group_id() if context else None
        result.info = {"pid": os.getpid(), "placement_group": group}
        return result


def call_python(text: str) -> AssistantTurn:
    """Every turn asks the python tool for 6 * 7."""
    return AssistantTurn(text, (ToolCall("python", {"code": "print(6 * 7)"}),))


def broken_parser(text: str) -> AssistantTurn:
    """A parser with a bug."""
    raise KeyError("oops")


def call_quick(text: str) -> AssistantTurn:
    """Every turn calls ``slow_tool`` for 0.15 s (a tool with latency)."""
    return AssistantTurn(text, (ToolCall("slow_tool", {"seconds": 0.15}),))


def as_question(observation, env) -> str:
    """A formatter the tiny addition model answers with a digit: state s as "s+1="."""
    return f"{observation}+1="
