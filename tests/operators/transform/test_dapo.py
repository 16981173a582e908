"""DAPO: dynamic sampling (drop zero-variance prompt groups, keep the first N informative of an
oversampled batch, refill rounds on fresh prompts until N are, counts in the metrics) and the
soft overlong reward shaping."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from flows.cli import main
from operators.source.dataset import DatasetParams, DatasetSource
from operators.transform.dynamic_sampling import (
    DynamicSampling,
    DynamicSamplingParams,
    select_groups,
)
from operators.transform.overlong_penalty import (
    OverlongPenalty,
    OverlongPenaltyParams,
    overlong_penalties,
)
from rldag.config.errors import InputError
from rldag.config.spec import load_pipeline
from rldag.graph.dag import build_graph
from rldag.graph.operator import NodeContext
from rldag.graph.refill import shortfall
from rldag.graph.reported import reported_metrics
from tests.support.paths import ROOT

EXAMPLE = ROOT / "examples" / "dapo.yaml"


def ctx(node: str = "filter", iteration: int = 0, round: int = 0) -> NodeContext:
    return NodeContext(node, iteration, seed=0, run_uri="", round=round)


# --- overlong reward shaping -------------------------------------------------------------


def test_overlong_penalty_by_hand():
    # max_len 10, buffer 4: free up to 6 tokens, then -1/4 per token, -1 from 10 on (x 0.5).
    got = overlong_penalties(np.array([0, 6, 7, 8, 10, 12]), 10, 4, penalty_factor=0.5)
    np.testing.assert_allclose(got, [0.0, 0.0, -0.125, -0.25, -0.5, -0.5])


def paper_overlong_reward(length: int, max_len: int, cache: int) -> float:
    """DAPO eq. 13: R_length(y) with L_max = max_len and L_cache = cache."""
    if length <= max_len - cache:
        return 0.0
    if length <= max_len:
        return ((max_len - cache) - length) / cache
    return -1.0


@pytest.mark.parametrize(("max_len", "buffer", "factor"), [(16, 4, 1.0), (20, 20, 0.3), (8, 1, 2)])
def test_overlong_penalty_matches_the_papers_formula(max_len, buffer, factor):
    lengths = np.arange(0, max_len + 5)
    expected = [factor * paper_overlong_reward(int(n), max_len, buffer) for n in lengths]
    np.testing.assert_allclose(overlong_penalties(lengths, max_len, buffer, factor), expected)


def test_overlong_penalty_is_added_to_the_reward():
    table = pa.table(
        {
            "reward": pa.array([1.0, 1.0, 0.0], pa.float32()),
            "response_ids": pa.array([[1], [1, 2, 3], [1, 2, 3, 4]], pa.list_(pa.int32())),
        }
    )
    op = OverlongPenalty(OverlongPenaltyParams(max_len=4, buffer=2, penalty_factor=1.0))
    out = op({"scored": table}, ctx("overlong"))
    assert out["overlong_penalty"].to_pylist() == [0.0, -0.5, -1.0]
    assert out["reward"].to_pylist() == [1.0, 0.5, -1.0]


def test_a_buffer_longer_than_max_len_is_refused_with_its_key_path():
    loaded = load_pipeline(EXAMPLE, ["nodes.overlong.params.buffer=9"])
    with pytest.raises(InputError, match=r"nodes\.overlong\.params\.buffer: must be <= max_len"):
        build_graph(loaded)


# --- dynamic sampling: the pure selection ------------------------------------------------

# prompt 5: rewards 1, 0, 1 (informative); 2: 0, 0 (all wrong); 9: 1, 1 (all right);
# 7: 0.5, 0.5, 0.25 (ties, but not all equal: informative); 3: one sample (no variance).
IDS = np.array([5, 5, 5, 2, 2, 9, 9, 7, 7, 7, 3])
REWARDS = np.array([1, 0, 1, 0, 0, 1, 1, 0.5, 0.5, 0.25, 1])


def test_select_groups_keeps_the_first_informative_groups_in_prompt_order():
    one = select_groups(REWARDS, IDS, train_groups=1)
    assert one.keep.tolist() == [True] * 3 + [False] * 8  # prompt 5 comes before 7
    assert (one.groups, one.kept, one.zero_variance, one.surplus, one.short) == (5, 1, 3, 1, 0)


def test_select_groups_keeps_what_it_has_when_short():
    three = select_groups(REWARDS, IDS, train_groups=3)
    assert three.keep.tolist() == [True] * 3 + [False] * 4 + [True] * 3 + [False]
    assert (three.kept, three.zero_variance, three.surplus, three.short) == (2, 3, 0, 1)


def test_select_groups_without_a_limit_keeps_every_informative_group():
    every = select_groups(REWARDS, IDS, train_groups=0)
    assert every.keep.tolist() == select_groups(REWARDS, IDS, train_groups=2).keep.tolist()
    assert (every.kept, every.surplus, every.short) == (2, 0, 0)


def test_validate_refuses_a_negative_train_groups_with_exit_2(capsys):
    assert main(["validate", str(EXAMPLE), "nodes.filter.params.train_groups=-1"]) == 2
    assert "nodes.filter.params.train_groups: must be >= 0, got -1" in capsys.readouterr().err


def test_plan_shows_the_filter_waits_for_the_whole_batch(capsys):
    assert main(["plan", str(EXAMPLE), "async.max_staleness=1", "pools.colocate=[]"]) == 0
    whole = next(line for line in capsys.readouterr().out.splitlines() if "whole batch:" in line)
    assert "filter" in [name.strip() for name in whole.split(":", 1)[1].split(",")]


def test_plan_shows_the_refill_rounds_and_what_generation_still_overlaps(capsys):
    assert main(["plan", str(EXAMPLE), "async.max_staleness=1", "pools.colocate=[]"]) == 0
    out = capsys.readouterr().out
    assert "refill: while filter is short, up to 9 more rounds of prompts, generate, score" in out
    assert "generate of iterations i+1 (pool rollout) with overlong, advantage, train of" in out


# --- dynamic sampling: the operator ------------------------------------------------------


def scored_table(ids: np.ndarray, rewards: np.ndarray) -> pa.Table:
    return pa.table(
        {
            "prompt_id": pa.array(ids, pa.int64()),
            "sample_idx": pa.array(range(len(ids)), pa.int32()),
            "reward": pa.array(rewards, pa.float32()),
            "acc": pa.array((rewards == 1).astype(np.int64)),
        }
    )


def test_the_filter_keeps_rows_of_informative_groups_and_reports_counts():
    op = DynamicSampling(DynamicSamplingParams(train_groups=3))
    out = op({"scored": scored_table(IDS, REWARDS)}, ctx())
    assert out["prompt_id"].to_pylist() == [5, 5, 5, 7, 7, 7]
    assert out["sample_idx"].to_pylist() == [0, 1, 2, 7, 8, 9]
    counts = json.loads(out.schema.metadata[b"rldag.metrics:filter"])
    assert counts == {
        "dapo/groups": 5,
        "dapo/kept_groups": 2,
        "dapo/dropped_groups": 3,
        "dapo/surplus_groups": 0,
        "dapo/short_groups": 1,
    }


def test_the_filter_metric_can_be_another_numeric_column():
    # On `acc` (1 when the reward is 1) prompt 7 has no correct sample: no signal.
    op = DynamicSampling(DynamicSamplingParams(metric="acc"))
    out = op({"scored": scored_table(IDS, REWARDS)}, ctx())
    assert sorted(set(out["prompt_id"].to_pylist())) == [5]


def test_the_filter_names_its_key_when_the_metric_column_is_missing():
    op = DynamicSampling(DynamicSamplingParams(metric="score"))
    with pytest.raises(InputError, match=r"nodes\.filter\.params\.metric: column 'score' is miss"):
        op({"scored": scored_table(IDS, REWARDS)}, ctx())


def test_the_filter_refuses_a_nan_metric_naming_the_row():
    op = DynamicSampling(DynamicSamplingParams())
    rewards = REWARDS.copy()
    rewards[4] = np.nan
    with pytest.raises(InputError, match=r"metric: column 'reward' is nan at row 4"):
        op({"scored": scored_table(IDS, rewards)}, ctx())


FLAT = scored_table(np.array([0, 0, 1, 1]), np.array([1.0, 1.0, 0.0, 0.0]))


def test_the_filter_fails_clearly_when_no_group_is_informative():
    op = DynamicSampling(DynamicSamplingParams(train_groups=2, max_rounds=1))
    with pytest.raises(ValueError, match="no prompt group of the 2 in iteration 4 has two"):
        op({"scored": FLAT}, ctx(iteration=4))


def test_after_its_last_refill_round_the_filter_fails_naming_the_rounds():
    op = DynamicSampling(DynamicSamplingParams(train_groups=2, max_rounds=3))
    with pytest.raises(ValueError, match=r"of the 2 \(3 rounds\) in iteration 4.*max_rounds"):
        op({"scored": FLAT}, ctx(iteration=4, round=2))


def test_with_rounds_left_a_short_filter_asks_for_a_refill_round():
    op = DynamicSampling(DynamicSamplingParams(train_groups=3, max_rounds=2))
    short = op({"scored": scored_table(IDS, REWARDS)}, ctx())
    assert shortfall(short, "filter") == 1  # 2 informative groups of 3
    assert shortfall(op({"scored": FLAT}, ctx()), "filter") == 3  # none yet: no failure
    last = op({"scored": scored_table(IDS, REWARDS)}, ctx(round=1))
    assert shortfall(last, "filter") == 0 and last.equals(short)


def test_validate_refuses_max_rounds_below_one_with_exit_2(capsys):
    assert main(["validate", str(EXAMPLE), "nodes.filter.params.max_rounds=0"]) == 2
    assert "nodes.filter.params.max_rounds: must be > 0, got 0" in capsys.readouterr().err


def test_reported_counts_are_counted_once_though_downstream_tables_inherit_them():
    graph = build_graph(load_pipeline(EXAMPLE))
    filtered = DynamicSampling(DynamicSamplingParams(train_groups=1))(
        {"scored": scored_table(IDS, REWARDS)}, ctx()
    )
    shaped = OverlongPenalty(OverlongPenaltyParams(max_len=4, buffer=2))(
        {"scored": filtered.append_column("response_ids", pa.array([[1]] * 3))}, ctx("overlong")
    )
    assert shaped.schema.metadata == filtered.schema.metadata  # inherited by the next node
    got = reported_metrics(graph, {"filter": filtered, "overlong": shaped})
    assert got["dapo/kept_groups"] == 1 and got["dapo/surplus_groups"] == 1
    assert got["dapo/groups"] == 5


# --- oversampling source -----------------------------------------------------------------


def test_oversampling_source_batches_are_deterministic_with_unique_prompt_ids(dataset):
    params = DatasetParams(path=str(dataset), batch_size=2, oversample=1.5)
    source, again = DatasetSource(params), DatasetSource(params)
    batches = [source({}, NodeContext("prompts", i, 7, "")) for i in range(4)]
    assert [b.num_rows for b in batches] == [3] * 4
    ids = [i for b in batches for i in b["prompt_id"].to_pylist()]
    assert ids == list(range(12))
    # the 6-row dataset: iterations 0-1 are epoch 0, every row once
    epoch0 = batches[0]["dataset_index"].to_pylist() + batches[1]["dataset_index"].to_pylist()
    assert sorted(epoch0) == list(range(6))
    assert again({}, NodeContext("prompts", 3, 7, "")).equals(batches[3])


def test_oversample_one_serves_the_plain_batches(dataset):
    plain = DatasetSource(DatasetParams(path=str(dataset), batch_size=2))
    order = np.random.default_rng([7, 0]).permutation(6)
    assert plain.batch_indices(1, seed=7).tolist() == order[2:4].tolist()


def test_oversample_below_one_is_refused_with_its_key_path():
    loaded = load_pipeline(EXAMPLE, ["nodes.prompts.params.oversample=0.5"])
    with pytest.raises(InputError, match=r"nodes\.prompts\.params\.oversample: must be >= 1"):
        build_graph(loaded)


# --- end to end ----------------------------------------------------------------------------


def zero_variance_groups(table: pa.Table, column: str = "reward") -> set[int]:
    groups: dict[int, set[float]] = {}
    for pid, value in zip(table["prompt_id"].to_pylist(), table[column].to_pylist(), strict=True):
        groups.setdefault(pid, set()).add(value)
    return {pid for pid, values in groups.items() if len(values) == 1}


@pytest.mark.slow
@pytest.mark.parametrize("k", [0, 1])
def test_dapo_pipeline_trains_only_on_informative_groups(run_pipeline, k):
    iterations, train_groups, per_iteration = 3, 8, 12  # batch_size 8, oversample 1.5
    run = run_pipeline(
        EXAMPLE,
        f"iterations={iterations}",
        "ray.enabled=false",
        f"async.max_staleness={k}",
        f"nodes.prompts.params.batch_size={train_groups}",
        "nodes.filter.params.max_rounds=1",  # oversampling alone; refill: the test below
    )
    metrics = run.metrics()
    assert [m["iteration"] for m in metrics] == list(range(iterations))
    for i, m in enumerate(metrics):
        prompts = run.table("prompts", i)
        assert prompts["prompt_id"].to_pylist() == list(range(i * 12, (i + 1) * 12))
        scored = run.table("score", i)
        kept = run.table("filter", i)
        assert zero_variance_groups(kept) == set()
        informative = sorted(set(scored["prompt_id"].to_pylist()) - zero_variance_groups(scored))
        assert sorted(set(kept["prompt_id"].to_pylist())) == informative[:train_groups]
        assert m["dapo/groups"] == per_iteration
        assert m["dapo/dropped_groups"] == len(zero_variance_groups(scored))
        assert m["dapo/kept_groups"] == len(set(kept["prompt_id"].to_pylist()))
        total = m["dapo/kept_groups"] + m["dapo/dropped_groups"] + m["dapo/surplus_groups"]
        assert total == per_iteration
        assert m["dapo/kept_groups"] + m["dapo/short_groups"] == train_groups
        trained = run.table("advantage", i)
        assert trained.num_rows == kept.num_rows
        assert min(trained["policy_version"].to_pylist()) >= i - k
        assert run.table("train", i)["policy_version"][0].as_py() == i + 1


@pytest.mark.slow
@pytest.mark.parametrize(("k", "mode"), [(0, "iteration"), (1, "iteration"), (1, "continuous")])
def test_refill_fills_the_batch_with_informative_groups_only(run_pipeline, k, mode):
    """Without oversampling the first round is short; refill rounds on fresh prompts fill
    each iteration's batch with informative groups, the earliest rounds' first."""
    iterations, train_groups, n = 4, 8, 4
    run = run_pipeline(
        EXAMPLE,
        f"iterations={iterations}",
        "ray.enabled=false",
        f"async.max_staleness={k}",
        f"async.mode={mode}",
        f"nodes.prompts.params.batch_size={train_groups}",
        "nodes.prompts.params.oversample=1.0",
        f"nodes.generate.params.n={n}",
    )
    metrics, drawn = run.metrics(), []
    assert sum(m["refill/rounds"] > 1 for m in metrics) >= 2  # the tiny task refills often
    for i, m in enumerate(metrics):
        rounds = run.rounds(i)
        assert len(rounds) == m["refill/rounds"]
        scored, kept = run.all_rounds("score", i), run.table("filter", i)
        drawn += run.all_rounds("prompts", i)["prompt_id"].to_pylist()
        assert zero_variance_groups(kept) == set()
        informative = sorted(set(scored["prompt_id"].to_pylist()) - zero_variance_groups(scored))
        assert sorted(set(kept["prompt_id"].to_pylist())) == informative[:train_groups]
        assert m["dapo/kept_groups"] == train_groups and m["dapo/short_groups"] == 0
        assert m["dapo/groups"] == train_groups * len(rounds)
        assert m["dapo/dropped_groups"] == len(zero_variance_groups(scored))
        extra = [run.table("generate", i, r) for r in rounds[1:]]
        assert m["refill/extra_prompts"] == train_groups * (len(rounds) - 1)
        assert (
            m["refill/extra_rows"]
            == sum(t.num_rows for t in extra)
            == m["refill/extra_prompts"] * n
        )
        tokens = sum(len(ids) for t in extra for ids in t["response_ids"].to_pylist())
        assert m["refill/extra_tokens"] == tokens
        assert (m["timing_s/refill"] > 0) == (len(rounds) > 1)
        versions = set(run.all_rounds("generate", i)["policy_version"].to_pylist())
        if mode == "iteration":  # every round samples the iteration's policy
            assert versions == {max(0, i - k)}
        else:  # the newest, within the bound
            assert min(versions) >= i - k
        assert run.table("advantage", i).num_rows == kept.num_rows == train_groups * n
    assert sorted(drawn) == list(range(len(drawn)))  # every prompt of the stream once, no gap
