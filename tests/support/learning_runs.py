"""The learning runs the suite's learning tests make, one function each, shared with
`bench/learning_spread.py`, which runs them over seeds and CPU kernel paths to measure the
distributions the tests' bars are set below.

Each run returns its per-iteration curve of the value its test's bar reads (the sampled
reward, or for the reward-model run the rule-checked accuracy the run never saw), plus any
extra figure the test checks. All start from the shipped tiny models (`make model`)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from examples.tiny_task import build_tiny_task
from examples.tiny_task.reward_model import build_tiny_reward_model
from tests.support.paths import ROOT
from tests.support.runs import StoredRunView, run_pipeline

CACHE = ROOT / ".cache"


@dataclass
class Curve:
    """A run's per-iteration values, its directory, and extra figures a test checks."""

    values: list[float]
    run_dir: Path
    extra: dict[str, float] = field(default_factory=dict)

    def first(self, n: int = 3) -> float:
        return statistics.mean(self.values[:n])

    def last(self, n: int = 3) -> float:
        return statistics.mean(self.values[-n:])


def on_task(pipeline: Path, runs: Path, task: Path, *overrides: str) -> StoredRunView:
    """`pipeline` run inline (the Run the flow uses) on the tiny task built in `task`."""
    model, prompts = task / "model", task / "train.parquet"
    paths = [f"storage.uri={runs}", f"model.path={model}", f"nodes.prompts.params.path={prompts}"]
    return run_pipeline(pipeline, *paths, *overrides)


def rewards(pipeline: Path, runs: Path, task: Path, *overrides: str) -> Curve:
    """The sampled reward per iteration of `pipeline` on `task`."""
    run = on_task(pipeline, runs, task, *overrides)
    return Curve(run.metric("reward/mean"), run.run_dir)


def default(runs: Path, *overrides: str) -> Curve:
    """pipeline.yaml: GRPO on addition, 80 iterations of 64 prompts x 16."""
    return rewards(ROOT / "pipeline.yaml", runs, build_tiny_task(CACHE / "tiny"), *overrides)


def async_example(runs: Path, *overrides: str) -> Curve:
    """examples/async.yaml: k = 1, split pools, 60 iterations of 32 x 8."""
    task = build_tiny_task(CACHE / "tiny")
    return rewards(ROOT / "examples" / "async.yaml", runs, task, *overrides)


def lora(runs: Path, *overrides: str) -> Curve:
    """examples/lora.yaml: the default task with low-rank adapters only."""
    task = build_tiny_task(CACHE / "tiny")
    return rewards(ROOT / "examples" / "lora.yaml", runs, task, *overrides)


def ppo_gae(runs: Path, *overrides: str) -> Curve:
    """examples/ppo_gae.yaml, 30 iterations, without Ray; extra: the critic's mean value at
    the last iteration."""
    task = build_tiny_task(CACHE / "tiny")
    pipeline = ROOT / "examples" / "ppo_gae.yaml"
    curve = rewards(pipeline, runs, task, "ray.enabled=false", "iterations=30", *overrides)
    values = pq.read_table(curve.run_dir / "iter=29" / "values.parquet")["values"].to_pylist()
    curve.extra["critic_value"] = statistics.mean(v for row in values for v in row)
    return curve


def tool(runs: Path, *overrides: str) -> Curve:
    """examples/agent_tools.yaml, its first 12 of 30 iterations."""
    task = build_tiny_task(CACHE / "tiny-lookup", task="lookup")
    return rewards(ROOT / "examples" / "agent_tools.yaml", runs, task, "iterations=12", *overrides)


def gateway(runs: Path, *overrides: str) -> Curve:
    """examples/agent_gateway.yaml (the OpenAI-SDK agent through the gateway), its first 12
    of 30 iterations."""
    task = build_tiny_task(CACHE / "tiny-lookup", task="lookup")
    pipeline = ROOT / "examples" / "agent_gateway.yaml"
    return rewards(pipeline, runs, task, "iterations=12", *overrides)


GUESS_ITERATIONS = 20


def later_guesses_consistent(agent_table: Path) -> float:
    """The share of guesses after an episode's first that the replies before them allow."""
    turns = pq.read_table(agent_table, columns=["turns"])["turns"].to_pylist()
    found = [json.loads(t["info"])["consistent"] for row in turns for t in row[1:] if t["info"]]
    return sum(found) / len(found)


def guess(runs: Path, *overrides: str) -> Curve:
    """examples/agent_env.yaml, its first 20 of 60 iterations; extra: the share of later
    guesses consistent with the replies over the first and the last 3 iterations."""
    task = build_tiny_task(CACHE / "tiny-guess", task="guess")
    pipeline = ROOT / "examples" / "agent_env.yaml"
    curve = rewards(pipeline, runs, task, f"iterations={GUESS_ITERATIONS}", *overrides)
    consistent = [
        later_guesses_consistent(curve.run_dir / f"iter={i}" / "agent.parquet")
        for i in range(GUESS_ITERATIONS)
    ]
    curve.extra["consistent_first"] = statistics.mean(consistent[:3])
    curve.extra["consistent_last"] = statistics.mean(consistent[-3:])
    return curve


RM_ITERATIONS = 40


def reward_model(runs: Path, *overrides: str) -> Curve:
    """examples/reward_model.yaml, 40 iterations rewarded only by the tiny reward model; the
    curve is the rule-checked accuracy (a reward the run never saw); extra: the mean reward
    of right and of over-long answers over the last 3 iterations (NaN when none)."""
    from operators.score.rewards.arithmetic import compute_score

    task = build_tiny_task(CACHE / "tiny")
    rm = build_tiny_reward_model(CACHE / "tiny_rm")
    pipeline = ROOT / "examples" / "reward_model.yaml"
    run = on_task(
        pipeline,
        runs,
        task,
        f"nodes.score.params.model_path={rm}",
        f"iterations={RM_ITERATIONS}",
        *overrides,
    )
    accuracy: list[float] = []
    right: list[float] = []
    too_long: list[float] = []
    for i in range(RM_ITERATIONS):
        rows = run.table("score", i).to_pylist()
        correct = [compute_score("", r["response"], r["ground_truth"]) for r in rows]
        accuracy.append(statistics.mean(correct))
        if i >= RM_ITERATIONS - 3:
            right += [r["reward"] for r, c in zip(rows, correct, strict=True) if c]
            too_long += [r["reward"] for r in rows if len(r["response"]) > 2]
    nan = float("nan")
    extra = {
        "right_reward": statistics.mean(right) if right else nan,
        "too_long_reward": statistics.mean(too_long) if too_long else nan,
    }
    return Curve(accuracy, run.run_dir, extra)


SCENARIOS: dict[str, Callable[..., Curve]] = {
    "default": default,
    "async": async_example,
    "lora": lora,
    "ppo_gae": ppo_gae,
    "tool": tool,
    "gateway": gateway,
    "guess": guess,
    "reward_model": reward_model,
}
