"""Agent rollouts: episodes/s with a 100 ms tool at concurrency 1 vs 16, and generated tokens/s
of multi-turn episodes against single-turn generation of the same number of tokens.

The policy is the tiny default model (``.cache/tiny``, built if missing); every turn calls a
tool that sleeps 100 ms (``BENCH_TOOL_LATENCY_S``; the parser below reads every turn as one
call), so
each episode is ``--turns`` model turns and ``--turns`` tool calls. At concurrency 1 an
episode's tool time stalls generation; at 16 the engine batches the turns of the live
episodes while others wait on their tools. Run from the repository root:

    python bench/agent_throughput.py [--episodes 64] [--turns 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operators.agent.environment import AssistantTurn, ToolCall  # noqa: E402

LATENCY = "BENCH_TOOL_LATENCY_S"  # seconds per tool call (default 0.1), read at each call


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


def run_agent(model: str, episodes: int, turns: int, concurrency: int) -> tuple[float, int]:
    """Wall seconds of ``episodes`` episodes and the tokens the model generated."""
    from operators.agent.loop import AgentLoop
    from operators.agent.params import AgentParams
    from rldag.operator import NodeContext

    params = AgentParams(
        model_path=model,
        tools=["bench.agent_throughput:slow_tool"],
        tool_parser="bench.agent_throughput:every_turn_calls",
        max_turns=turns,
        max_tokens_per_turn=8,
        max_total_tokens=64,
        max_concurrency=concurrency,
    )
    agent = AgentLoop(params)
    ctx = NodeContext(node="agent", iteration=0, seed=0, run_uri="")
    try:
        agent({"prompts": prompts(4)}, ctx)  # warm: engine, hosts, first forward
        start = time.perf_counter()
        table = agent({"prompts": prompts(episodes)}, ctx)
        wall = time.perf_counter() - start
    finally:
        agent.close()
    generated = sum(sum(m) for m in table["response_mask"].to_pylist())
    assert set(table["num_turns"].to_pylist()) == {turns}, table["num_turns"].to_pylist()
    return wall, generated


def run_single_turn(model: str, rows: int, tokens: int) -> float:
    """Wall seconds of single-turn generation of ``rows`` x ``tokens`` tokens (EOS ignored)."""
    from operators.generate import GenerateParams, TorchGenerate
    from rldag.operator import NodeContext

    generate = TorchGenerate(
        GenerateParams(model_path=model, max_new_tokens=tokens, ignore_eos=True)
    )
    ctx = NodeContext(node="generate", iteration=0, seed=0, run_uri="")
    generate({"prompts": prompts(4)}, ctx)
    start = time.perf_counter()
    generate({"prompts": prompts(rows)}, ctx)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()

    import torch

    from operators.tiny_task import build_tiny_task

    torch.set_num_threads(1)
    model = str(build_tiny_task(ROOT / ".cache" / "tiny") / "model")
    results = {}
    for concurrency in (1, 16):
        wall, generated = run_agent(model, args.episodes, args.turns, concurrency)
        results[concurrency] = (wall, generated)
        print(
            f"concurrency {concurrency:2d}: {args.episodes} episodes x {args.turns} turns "
            f"(100 ms per tool call) in {wall:.2f} s: {args.episodes / wall:.1f} episodes/s, "
            f"{generated / wall:.0f} generated tokens/s"
        )
    (w1, _), (w16, generated) = results[1], results[16]
    print(f"episodes/s, concurrency 16 vs 1: {w1 / w16:.1f}x")
    os.environ[LATENCY] = "0"
    w0, generated0 = run_agent(model, args.episodes, args.turns, 16)
    per_row = max(1, round(generated0 / args.episodes))
    single = run_single_turn(model, args.episodes, per_row)
    tokens = per_row * args.episodes
    print(
        f"generated tokens/s: single-turn ({args.episodes} x {per_row} tokens) "
        f"{tokens / single:.0f}; agent at concurrency 16 with instant tools "
        f"{generated0 / w0:.0f} ({generated0 / w0 / (tokens / single):.2f}x), with 100 ms "
        f"tools {generated / w16:.0f} ({generated / w16 / (tokens / single):.2f}x)"
    )


if __name__ == "__main__":
    main()
