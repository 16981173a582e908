"""The `reward_model` score operator on the tiny reward model: token-budget micro-batches
give the scores of one row at a time, normalisation matches hand-computed values, the raw
score is kept, over-long rows go to on_error, and a run rewarded only by it learns."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from examples.tiny_task.problems import all_problems
from operators.score.reward_function import OnError
from operators.score.reward_service.reward_model import (
    Normalize,
    RewardModelParams,
    RewardModelScorer,
    RunningMoments,
    normalized,
)
from operators.train.micro_batches import plan_sequences
from rldag.config.errors import RowError
from rldag.graph.operator import NodeContext
from tests.support import learning_runs

CTX = NodeContext("rm", 0, 0, "")


def test_sequences_are_cut_by_padded_tokens_in_length_order():
    lengths = np.array([5, 1, 9, 2, 2, 8])
    plan = plan_sequences(lengths, max_tokens=10)
    assert sorted(np.concatenate(plan).tolist()) == list(range(6))
    for micro in plan:
        assert len(micro) * lengths[micro].max() <= 10 or len(micro) == 1
    assert [lengths[m].tolist() for m in plan][0] == [1, 2, 2]  # shortest first
    assert len(plan_sequences(lengths, max_tokens=0)) >= 1


def test_running_moments_and_normalisations_match_numpy():
    rng = np.random.default_rng(0)
    chunks = [rng.normal(3, 2, size=n) for n in (5, 1, 12)]
    moments = RunningMoments()
    for i, chunk in enumerate(chunks):
        out = normalized(chunk, Normalize.running, moments, eps=1e-6)
        seen = np.concatenate(chunks[: i + 1])
        assert moments.mean == pytest.approx(seen.mean()) and moments.std == pytest.approx(
            seen.std()
        )
        assert out == pytest.approx((chunk - seen.mean()) / (seen.std() + 1e-6))
    raw = np.array([-2.0, 0.0, 3.0])
    assert normalized(raw, Normalize.sigmoid, RunningMoments(), 1e-6) == pytest.approx(
        [1 / (1 + np.exp(2.0)), 0.5, 1 / (1 + np.exp(-3.0))]
    )
    assert normalized(raw, Normalize.none, RunningMoments(), 1e-6).tolist() == raw.tolist()


def _rows(problems=None, answers=None) -> pa.Table:
    problems = problems or all_problems()[:24]
    answers = answers or [str((p.a + p.b + (i % 3 == 0)) % 19) for i, p in enumerate(problems)]
    return pa.table(
        {
            "prompt_id": pa.array([p.index for p in problems], pa.int64()),
            "prompt": [p.prompt for p in problems],
            "response": answers,
        }
    )


def test_micro_batches_score_like_one_row_at_a_time(tiny_rm):
    table = _rows()
    batched = RewardModelScorer(RewardModelParams(model_path=str(tiny_rm), micro_batch_tokens=40))
    single = RewardModelScorer(RewardModelParams(model_path=str(tiny_rm), micro_batch_size=1))
    out = batched({"rollouts": table}, CTX)
    alone = single({"rollouts": table}, CTX)
    assert batched.forwards < single.forwards == table.num_rows
    raw = [json.loads(i)["rm_score"] for i in out["reward_info"].to_pylist()]
    assert raw == pytest.approx(
        [json.loads(i)["rm_score"] for i in alone["reward_info"].to_pylist()], abs=1e-5
    )
    assert out["reward"].to_pylist() == pytest.approx(raw, abs=1e-6)  # normalize: none


def test_the_tiny_rm_reads_text_with_the_tiny_policys_tokenizer(tiny_rm, tiny_task):
    from transformers import AutoTokenizer

    rm, policy = (AutoTokenizer.from_pretrained(d) for d in (tiny_rm, tiny_task / "model"))
    assert rm.get_vocab() == policy.get_vocab() and len(rm) > 10
    assert rm("3+4=7")["input_ids"] == policy("3+4=7")["input_ids"]


def test_the_tiny_rm_prefers_right_sums(tiny_rm):
    problems = all_problems()
    right = _rows(problems, [p.answer for p in problems])
    wrong = _rows(problems, [str((p.a + p.b + 1) % 19) for p in problems])
    scorer = RewardModelScorer(
        RewardModelParams(model_path=str(tiny_rm), normalize=Normalize.sigmoid)
    )
    r = np.array(scorer({"rollouts": right}, CTX)["reward"].to_pylist())
    w = np.array(scorer({"rollouts": wrong}, CTX)["reward"].to_pylist())
    assert (r > w).mean() >= 0.9 and ((0 < r) & (r < 1)).all()


def test_over_long_rows_go_to_on_error(tiny_rm):
    table = _rows(answers=["7"] * 23 + ["1" * 30])
    params = {"model_path": str(tiny_rm), "max_length": 12}
    out = RewardModelScorer(RewardModelParams(**params, on_error=OnError.zero))(
        {"rollouts": table}, CTX
    )
    assert (
        out["reward"][23].as_py() == 0.0 and "over max_length 12" in out["reward_error"][23].as_py()
    )
    assert set(out["reward_error"].to_pylist()[:23]) == {""}
    dropped = RewardModelScorer(RewardModelParams(**params, on_error=OnError.drop))(
        {"rollouts": table}, CTX
    )
    assert dropped.num_rows == 23
    with pytest.raises(RowError, match="row 23 .*reward model .*over max_length"):
        RewardModelScorer(RewardModelParams(**params))({"rollouts": table}, CTX)


@pytest.mark.slow
def test_a_run_rewarded_only_by_the_tiny_rm_learns_addition(ray_local, tmp_path):
    """The rule-checked accuracy (a reward the run never saw) grows 1.8x or more, to 0.28 or
    more, within 40 iterations, and the reward model keeps scoring over-long answers below
    right ones (an earlier one, never shown such answers, scored numbers like 1971 above the
    right sum on some CPUs, and the policy learned to write them).

    Measured from the shipped policy and reward model (bench/learning_spread.py --scenarios
    reward_model, seeds 0-4 under AVX-512 and AVX2 kernels, seeds 0-2 under scalar ones, 13
    runs, 2026-12): first 3 0.130-0.171, last 3 0.333-0.484, 2.22-3.17x; over-long answers
    scored 10.7-15.2 below right ones."""
    curve = learning_runs.reward_model(tmp_path)
    first, last = curve.first(), curve.last()
    assert last >= 0.28 and last >= 1.8 * first, curve.values
    right, too_long = curve.extra["right_reward"], curve.extra["too_long_reward"]
    if not np.isnan(too_long):  # none at all is no hacking either
        assert too_long < right - 5, (too_long, right)
