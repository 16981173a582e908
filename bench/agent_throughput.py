"""Agent rollouts: episodes/s with a 100 ms tool at concurrency 1 vs 16, and generated tokens/s
of multi-turn episodes against single-turn generation of the same number of tokens, for short
and for long turns.

The policy is the tiny default model (``.cache/tiny``, built if missing); every turn calls a
tool that sleeps 100 ms (``BENCH_TOOL_LATENCY_S``; the parser below reads every turn as one
call), so each episode is ``--turns`` model turns and ``--turns`` tool calls. At concurrency 1
an episode's tool time stalls generation; at 16 the engine batches the turns of the live
episodes while others wait on their tools.

The *gateway* case runs the same episodes as a user's OpenAI-SDK agent (``chatty_agent``: each
turn is one chat request, answered by a user message) behind ``agent_gateway``, for both turn
lengths: its tokens/s against single-turn and against ``agent_loop`` with instant tools, all
episodes in flight, and its per-request overhead: wall seconds per request at concurrency 1
minus ``agent_loop``'s per turn, through the client the agent is handed (in process) and
through a client the agent makes itself (HTTP on loopback, ``chatty_agent_over_http``).

Two turn lengths: *short*, the tiny model as trained (it answers in 1-2 tokens, so per-turn
costs dominate), and *long*, the same weights with a 1024-position context sampled at
temperature 100 (near-uniform over its 16-token vocabulary: a turn ends when it samples EOS,
after ~16 tokens); the gateway case also runs long turns on a rollout server and on *wider*,
an 8.4M-parameter random copy (8 layers x 256), whose decode step is no longer shorter than
a request's Python. Single-turn baselines: each episode's tokens as one sequence of that
length (the same tokens), and every row the mean length. Run from the repository root:

    python bench/agent_throughput.py [--episodes 64] [--turns 3] [--repeats 3] [--gateway-only]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from machine import describe, load_line

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operators.generate.agent.environment import AssistantTurn, ToolCall  # noqa: E402

ENGINES = {"torch": "the in-process engine", "server": "a rollout server (engine: server)"}
LATENCY = "BENCH_TOOL_LATENCY_S"  # seconds per tool call (default 0.1), read at each call
# The sampling and budgets of each turn length (the long one on the long-context copy).
SETTINGS = {
    "short": {"temperature": 1.0, "max_tokens_per_turn": 8, "max_total_tokens": 64},
    "long": {"temperature": 100.0, "max_tokens_per_turn": 96, "max_total_tokens": 512},
}
SETTINGS["wider"] = SETTINGS["long"]  # long turns on a wider, deeper copy (`wider_copy`)


def slow_tool(key: int) -> str:
    """Answers after the bench's tool latency.

    Args:
        key: any number
    """
    time.sleep(float(os.environ.get(LATENCY, "0.1")))
    return str(key % 10)


def every_turn_calls(text: str) -> AssistantTurn:
    """A parser that reads every turn as one call of ``slow_tool`` (fixed episode shape)."""
    return AssistantTurn(text, (ToolCall("slow_tool", {"key": len(text)}, "call_0"),))


def prompts(count: int) -> pa.Table:
    return pa.table(
        {
            "prompt_id": list(range(count)),
            "prompt": [f"{i % 10}+{i // 10 % 10}=" for i in range(count)],
        }
    )


def long_context_copy(model: str, into: Path, positions: int = 1024, name: str = "model") -> str:
    """A copy of ``model`` whose config allows ``positions`` positions (RoPE has no limit)."""
    target = into / name
    shutil.copytree(model, target)
    for name, key in (
        ("config.json", "max_position_embeddings"),
        ("tokenizer_config.json", "model_max_length"),
    ):
        path = target / name
        config = json.loads(path.read_text())
        config[key] = positions
        path.write_text(json.dumps(config))
    return str(target)


def wider_copy(model: str, into: Path, hidden: int = 256, layers: int = 8) -> str:
    """A long-context copy of ``model`` with ``layers`` layers of width ``hidden`` and random
    weights (seed 0; 8.4M parameters, 17x the tiny model's): the same tokenizer and chat
    template, and a decode step long enough that per-request Python is no longer most of it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    path = long_context_copy(model, into, name="wider")
    config = AutoConfig.from_pretrained(path)
    config.hidden_size, config.intermediate_size = hidden, 4 * hidden
    config.num_attention_heads = config.num_key_value_heads = hidden // 32
    config.num_hidden_layers, config.layer_types = layers, ["full_attention"] * layers
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    return path


def best_wall(op: Any, episodes: int, repeats: int) -> tuple[float, pa.Table]:
    """The fastest of `repeats` calls of an agent operator on `episodes` prompts (after one
    warm-up call: engine, hosts or server, first forward), and the last call's table; the
    operator is closed after."""
    from rldag.graph.operator import NodeContext

    ctx = NodeContext(node="agent", iteration=0, seed=0, run_uri="")
    try:
        op({"prompts": prompts(4)}, ctx)
        wall = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            table = op({"prompts": prompts(episodes)}, ctx)
            wall = min(wall, time.perf_counter() - start)
    finally:
        op.close()
    return wall, table


@dataclass(frozen=True)
class Episodes:
    """A batch of agent episodes: the model, how many, turns each, how many at once, the turn
    length (``SETTINGS``) and how many timed runs (the best counts)."""

    model: str
    episodes: int
    turns: int
    concurrency: int
    setting: str = "short"
    repeats: int = 1


def run_agent(w: Episodes) -> tuple[float, int, float]:
    """Wall seconds of ``w``'s episodes on ``agent_loop`` (the best of its runs), the tokens
    the model generated and the mean number of turns."""
    from operators.generate.agent.loop import AgentLoop
    from operators.generate.agent.params import AgentParams

    params = AgentParams(
        model_path=w.model,
        tools=["bench.agent_throughput:slow_tool"],
        tool_parser="bench.agent_throughput:every_turn_calls",
        max_turns=w.turns,
        max_concurrency=w.concurrency,
        **SETTINGS[w.setting],
    )
    wall, table = best_wall(AgentLoop(params), w.episodes, w.repeats)
    generated = sum(sum(m) for m in table["response_mask"].to_pylist())
    num_turns = table["num_turns"].to_pylist()
    if w.setting == "short":  # the trained model always stops: every episode has every turn
        assert set(num_turns) == {w.turns}, num_turns
    return wall, generated, sum(num_turns) / len(num_turns)


async def chatty_agent(client: Any, task: dict[str, Any]) -> float:
    """``BENCH_TURNS`` chat requests, each reply answered by a user message (the gateway
    case's agent, as a user writes it against the OpenAI SDK)."""
    messages: list[Any] = [{"role": "user", "content": task["prompt"]}]
    for _ in range(int(os.environ.get("BENCH_TURNS", "3"))):
        reply = await client.chat.completions.create(model="policy", messages=messages)
        messages += [reply.choices[0].message, {"role": "user", "content": "1+1="}]
    return 0.0


_HTTP: dict[Any, Any] = {}  # one keep-alive connection pool per agents' event loop


async def chatty_agent_over_http(client: Any, task: dict[str, Any]) -> float:
    """``chatty_agent`` on an OpenAI client of its own: HTTP on loopback to the session's URL
    (an agent that makes its client itself instead of using the one it is handed)."""
    import httpx
    import openai

    loop = asyncio.get_running_loop()
    if loop not in _HTTP:
        _HTTP[loop] = httpx.AsyncClient(timeout=None)
    own = openai.AsyncOpenAI(
        base_url=str(client.base_url),
        api_key=client.api_key,
        http_client=_HTTP[loop],
        max_retries=0,
    )
    return await chatty_agent(own, task)


def run_gateway(
    w: Episodes, agent: str = "chatty_agent", engine: str = "torch"
) -> tuple[float, list[int], int]:
    """Wall seconds of ``w``'s episodes behind the gateway (the best of its runs) on ``engine``
    (``server``: one rldag rollout server, its own process), the tokens the model generated in
    each episode and the requests made."""
    from operators.generate.gateway.node import AgentGateway
    from operators.generate.gateway.params import GatewayParams

    os.environ["BENCH_TURNS"] = str(w.turns)
    params = GatewayParams(
        model_path=w.model,
        agent=f"bench.agent_throughput:{agent}",
        max_turns=w.turns,
        max_concurrency=w.concurrency,
        engine=engine,
        servers=1,
        **SETTINGS[w.setting],
    )
    wall, table = best_wall(AgentGateway(params), w.episodes, w.repeats)
    per_episode = [sum(m) for m in table["response_mask"].to_pylist()]
    return wall, per_episode, sum(table["requests"].to_pylist())


def gateway_case(model: str, episodes: int, turns: int, repeats: int) -> list[str]:
    """The gateway's tokens/s against single-turn and agent_loop (instant tools, every
    episode in flight) for both turn lengths, and its per-request overhead at concurrency 1
    through the client the agent is handed and over HTTP. Returns the lines to print."""
    os.environ[LATENCY] = "0"
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        copies = {"long": long_context_copy, "wider": wider_copy}
        for setting in ("short", "long", "wider"):
            path = copies[setting](model, Path(tmp)) if setting in copies else model
            batch = Episodes(path, episodes, turns, episodes, setting, repeats)
            loop_wall, loop_generated, _ = run_agent(batch)
            for engine in ("torch", "server") if setting == "long" else ("torch",):
                wall, lengths, requests = run_gateway(batch, engine=engine)
                generated = sum(lengths)
                per_row = max(1, round(generated / episodes))
                single = generated / run_single_turn(path, episodes, per_row, 3 * repeats)
                same = generated / run_single_turn_lengths(path, lengths, 3 * repeats)
                rate, loop_rate = generated / wall, loop_generated / loop_wall
                lines.append(
                    f"gateway on {ENGINES[engine]}, {setting} turns ({generated / requests:.1f} "
                    f"tokens a request, {max(lengths)} in the longest episode; {episodes} "
                    f"OpenAI-SDK episodes x {turns} requests, all in flight): {rate:.0f} "
                    f"tokens/s = {rate / same:.2f}x single-turn of the same tokens (each "
                    f"episode's as one sequence: {same:.0f}), {rate / single:.2f}x single-turn "
                    f"of {episodes} x {per_row} tokens ({single:.0f}), {rate / loop_rate:.2f}x "
                    f"agent_loop in process ({loop_rate:.0f})"
                )
    one = 16  # episodes at concurrency 1
    alone = Episodes(model, one, turns, 1, "short", repeats)
    loop_one, _, _ = run_agent(alone)
    per_turn = loop_one / (one * turns) * 1000
    for agent, how in (("chatty_agent", "its client"), ("chatty_agent_over_http", "HTTP")):
        one_wall, _, requests = run_gateway(alone, agent)
        per_request = one_wall / requests * 1000
        lines.append(
            f"gateway overhead per request at concurrency 1 ({how}): "
            f"{per_request - per_turn:.1f} ms ({per_request:.1f} ms per request vs "
            f"{per_turn:.1f} ms per agent_loop turn)"
        )
    return lines


def run_single_turn(model: str, rows: int, tokens: int, repeats: int) -> float:
    """Wall seconds of single-turn generation of ``rows`` x ``tokens`` tokens (EOS ignored),
    the best of ``repeats`` runs."""
    from operators.generate.single_turn import GenerateParams, TorchGenerate
    from rldag.graph.operator import NodeContext

    generate = TorchGenerate(
        GenerateParams(model_path=model, max_new_tokens=tokens, ignore_eos=True)
    )
    ctx = NodeContext(node="generate", iteration=0, seed=0, run_uri="")
    generate({"prompts": prompts(4)}, ctx)
    wall = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        generate({"prompts": prompts(rows)}, ctx)
        wall = min(wall, time.perf_counter() - start)
    return wall


def run_single_turn_lengths(model: str, lengths: list[int], repeats: int) -> float:
    """Wall seconds of single-turn generation in process of one sequence per entry of
    ``lengths``, each exactly that many tokens (EOS ignored), all in one batch: the same
    tokens as episodes of those lengths, without their turns. The best of ``repeats``."""
    from operators.model.hf import load_causal_lm
    from operators.rollout import SamplingParams, TorchEngine

    batcher = TorchEngine(load_causal_lm(model)).batcher
    prompt = [5, 12, 6, 13]  # "a+b=" ids of the tiny task
    wall = float("inf")
    for _ in range(repeats + 1):  # the first warms up
        start = time.perf_counter()
        tickets = {
            batcher.submit(
                prompt,
                SamplingParams(temperature=1.0, max_new_tokens=max(1, n), ignore_eos=True),
                seed=0,
                index=i,
                stop_ids=[],
            )
            for i, n in enumerate(lengths)
        }
        while tickets:
            tickets -= {ticket for ticket, _ in batcher.step()}
        wall = min(wall, time.perf_counter() - start)
    return wall


def tokens_per_second(model: str, setting: str, episodes: int, turns: int, repeats: int) -> str:
    """Generated tokens/s of the agent with 16 episodes in flight (instant and 100 ms tools)
    and with all of them (instant tools: as many rows per decode step as single-turn has),
    against single-turn generation of the same tokens per row. Each is the best of
    ``repeats`` runs (single-turn, a fraction of a second: of 3x as many), as the machine may
    be shared. Returns the line to print."""
    rates = {}
    for concurrency, latency in ((16, "0"), (16, "0.1"), (episodes, "0")):
        os.environ[LATENCY] = latency
        wall, generated, mean_turns = run_agent(
            Episodes(model, episodes, turns, concurrency, setting, repeats)
        )
        rates[concurrency, latency] = generated / wall
    per_row = max(1, round(generated / episodes))
    single = per_row * episodes / run_single_turn(model, episodes, per_row, 3 * repeats)
    (instant, tools, wide) = (f"{r:.0f} ({r / single:.2f}x)" for r in rates.values())
    return (
        f"{setting} turns ({generated / episodes / mean_turns:.1f} tokens per turn, "
        f"{mean_turns:.2f} turns): single-turn ({episodes} x {per_row} tokens) {single:.0f} "
        f"tokens/s; agent, 16 in flight: instant tools {instant}, 100 ms tools {tools}; "
        f"all {episodes} in flight, instant tools: {wide}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="tokens/s: best of this many")
    parser.add_argument("--gateway-only", action="store_true", help="only the gateway case")
    args = parser.parse_args()
    print(describe())
    print(load_line("start"), flush=True)

    import torch

    from examples.tiny_task import build_tiny_task

    torch.set_num_threads(1)
    model = str(build_tiny_task(ROOT / ".cache" / "tiny") / "model")
    gateway = gateway_case(model, args.episodes, args.turns, args.repeats)
    if args.gateway_only:
        print(load_line("end"))
        print(*gateway, sep="\n")
        return
    walls = {}
    for concurrency in (1, 16):
        wall, generated, _ = run_agent(Episodes(model, args.episodes, args.turns, concurrency))
        walls[concurrency] = wall
        print(
            f"concurrency {concurrency:2d}: {args.episodes} episodes x {args.turns} turns "
            f"(100 ms per tool call) in {wall:.2f} s: {args.episodes / wall:.1f} episodes/s, "
            f"{generated / wall:.0f} generated tokens/s"
        )
    headline = [f"episodes/s, concurrency 16 vs 1: {walls[1] / walls[16]:.1f}x"]
    headline.append(tokens_per_second(model, "short", args.episodes, args.turns, args.repeats))
    with tempfile.TemporaryDirectory() as tmp:
        long = long_context_copy(model, Path(tmp))
        headline.append(tokens_per_second(long, "long", args.episodes, args.turns, args.repeats))
    print(load_line("end"))
    print(*gateway, *headline, sep="\n")


if __name__ == "__main__":
    main()
