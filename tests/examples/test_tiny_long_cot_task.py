"""The long chain-of-thought task: its problems' length distribution (no model), its reward on
hand-checked answers, the shipped build, and examples/long_cot.yaml run for a few iterations."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from examples.tiny_task import build_tiny_task, is_built
from examples.tiny_task.long_cot import LongCotTaskParams, split_problems
from examples.tiny_task.long_cot.evaluate import p99
from examples.tiny_task.long_cot.params import LongCotDataParams
from examples.tiny_task.long_cot.problems import LongCotProblem, corpus_lines, scratchpad
from examples.tiny_task.long_cot.reward import compute_score, extract_answer
from examples.tiny_task.long_cot.tokenizer import train_long_cot_tokenizer
from examples.tiny_task.shipped import SHIPPED_ROOT, is_installed
from tests.support.paths import ROOT

EXAMPLE = ROOT / "examples" / "long_cot.yaml"


@pytest.fixture(scope="module")
def tokenizer():
    return train_long_cot_tokenizer(corpus_lines())


def test_the_scratchpad_adds_digit_by_digit_with_carries() -> None:
    assert scratchpad("47", "85") == "7+5+0=12;4+8+1=13;"
    problem = LongCotProblem(0, "047", "985")
    assert problem.prompt == "047+985="
    assert problem.answer == "7+5+0=12;4+8+1=13;0+9+1=10;=1032"
    assert problem.ground_truth == "1032"


def test_reference_lengths_have_a_long_tail(tokenizer) -> None:
    """The issue's bars on the reference answers (tokens, EOS counted): median >= 24,
    99th percentile >= 6x the median, all within max_new_tokens = 256."""
    for split in ("train", "test"):
        problems = split_problems(LongCotDataParams(), split)
        lengths = [len(tokenizer(p.answer)["input_ids"]) + 1 for p in problems]
        median = statistics.median(lengths)
        assert 24 <= median <= 40, (split, median)
        assert p99(lengths) >= 6 * median, (split, p99(lengths))
        assert max(lengths) <= 256
        assert tokenizer.decode(tokenizer(problems[0].answer)["input_ids"]) == problems[0].answer


def test_the_splits_are_seeded_and_differ() -> None:
    params = LongCotDataParams()
    train = split_problems(params, "train")
    assert train == split_problems(params, "train") and len(train) == params.train_problems
    assert train[: len(split_problems(params, "test"))] != split_problems(params, "test")


@pytest.mark.parametrize(
    ("response", "reward"),
    [
        ("7+5+0=12;4+8+1=13;=132", 1.0),  # right
        ("7+5+0=12;4+8+1=13;=132<eos>", 1.0),  # end marker text is allowed
        (" 7+5+0=12;4+8+1=13;=132\n", 1.0),  # surrounding whitespace too
        ("7+5+0=12;4+8+1=13;=131", 0.0),  # wrong answer
        ("7+5+0=12;4+8+1=13;=0132", 0.0),  # not the answer's exact text
        ("7+5+0=12;4+8+0=12;=132", 1.0),  # a wrong step, right answer: the answer is verified
        ("132", 0.0),  # no scratchpad
        ("7+5+0=12;4+8+1=13;", 0.0),  # no answer
        ("7+5+0=12;4+8+1=13;=132;", 0.0),  # trailing junk
        ("7+5=12;=132", 0.0),  # a malformed step
        ("", 0.0),
    ],
)
def test_the_reward_on_hand_checked_answers(response: str, reward: float) -> None:
    assert compute_score("long_cot", response, "132") == reward


def test_extract_answer() -> None:
    assert extract_answer("1+1+0=02;=2") == "2"
    assert extract_answer("=2") is None


def test_the_shipped_build_installs_and_verifies(tmp_path: Path) -> None:
    shipped = SHIPPED_ROOT / "long_cot"
    assert is_installed(shipped, shipped)
    out = build_tiny_task(tmp_path / "long-cot", task="long_cot")
    assert is_installed(out, shipped) and is_built(out, LongCotTaskParams())
    from transformers import AutoConfig, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out / "model")
    assert (
        tok.apply_chat_template(
            [{"role": "user", "content": "12+34="}], tokenize=False, add_generation_prompt=True
        )
        == "12+34="
    )
    config = AutoConfig.from_pretrained(out / "model")
    assert config.max_position_embeddings >= 50 + 256


def test_the_example_pipeline_runs(tmp_path: Path, run_pipeline) -> None:
    out = build_tiny_task(tmp_path / "long-cot", task="long_cot")
    stored = run_pipeline(
        EXAMPLE,
        f"model.path={out / 'model'}",
        f"nodes.prompts.params.path={out / 'train.parquet'}",
        "nodes.prompts.params.batch_size=4",
        "nodes.generate.params.n=2",
        iterations=2,
    )
    assert stored.metric("iteration") == [0, 1]
    for i in range(2):
        rows = stored.table("score", i).to_pylist()
        assert len(rows) == 4 * 2
        assert all(r["data_source"] == "long_cot" for r in rows)
        assert all(r["reward"] in (0.0, 1.0) for r in rows)
        assert all(1 <= len(r["response_ids"]) <= 256 for r in rows)
    assert max(stored.metric("response_length/max")) <= 256
