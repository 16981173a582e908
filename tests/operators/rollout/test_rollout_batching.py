"""Continuous batching in the torch engine: per-sequence results do not depend on batching."""

from __future__ import annotations

import pytest
import torch

from operators.rollout import SamplingParams, TorchEngine
from operators.rollout.rng import sequence_key, uniforms
from tests.support.tiny_models import random_causal_lm
from tests.support.tolerances import logprob_atol

PROMPTS = [[1, 2, 3], [5, 6, 7, 8, 9, 10, 11], [4], [7, 7, 12, 40], [9, 9]]


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return random_causal_lm()


def _tokens(groups):
    return [[c.token_ids for c in group] for group in groups]


def test_continuous_batching_matches_one_at_a_time(model) -> None:
    """3 slots for 15 sequences (refilled mid-flight) give what one slot at a time gives."""
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=12, seed=11)
    batched = TorchEngine(model, max_batch_size=3).generate(PROMPTS, params)
    solo = TorchEngine(model, max_batch_size=1).generate(PROMPTS, params)
    assert _tokens(batched) == _tokens(solo)
    for prompt, group, ref_group in zip(PROMPTS, batched, solo, strict=True):
        for got, ref in zip(group, ref_group, strict=True):
            assert got.finish_reason == ref.finish_reason
            atol = logprob_atol(model, prompt, ref.token_ids)
            torch.testing.assert_close(got.logprobs, ref.logprobs, atol=atol, rtol=0)


def test_identical_sequences_decoded_once_give_the_same_results(model) -> None:
    """Samples of a group that drew the same tokens are one sequence: decoding it once for all
    of them (dedup) gives every sample exactly what decoding each gives, mid-flight refills
    and compaction included."""
    params = SamplingParams(n=8, temperature=0.3, max_new_tokens=12, seed=5)  # peaked: repeats
    results = {}
    for dedup in (True, False):
        engine = TorchEngine(model, max_batch_size=20)
        engine.batcher.deduplicate = dedup
        results[dedup] = engine.generate(PROMPTS, params)
        if dedup:
            assert engine.batcher.deduplicated_rows > 0  # it did take the shortcut
    assert _tokens(results[True]) == _tokens(results[False])
    for prompt, group, ref_group in zip(PROMPTS, results[True], results[False], strict=True):
        for got, ref in zip(group, ref_group, strict=True):
            assert got.finish_reason == ref.finish_reason
            # float rounding only: fewer rows change the matmuls' blocking, not their math
            atol = logprob_atol(model, prompt, ref.token_ids, 0.3)
            torch.testing.assert_close(got.logprobs, ref.logprobs, atol=atol, rtol=0)
    tokens = [tuple(ids) for group in _tokens(results[True]) for ids in group]
    assert len(set(tokens)) > len(PROMPTS)  # the samples still diverge where they drew apart


def test_full_batch_and_slot_refill_give_identical_tokens(model) -> None:
    params = SamplingParams(n=4, temperature=0.9, top_p=0.95, max_new_tokens=10, seed=3)
    wide = _tokens(TorchEngine(model, max_batch_size=64).generate(PROMPTS, params))
    narrow = _tokens(TorchEngine(model, max_batch_size=5).generate(PROMPTS, params))
    assert wide == narrow
    assert len({tuple(t) for t in wide[1]}) > 1  # samples of one group differ


def test_hf_decoder_matches_fast_decoder(model) -> None:
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=5, top_k=20)
    fast = TorchEngine(model, decoder="fast").generate(PROMPTS, params)
    generic = TorchEngine(model, decoder="hf").generate(PROMPTS, params)
    assert _tokens(fast) == _tokens(generic)
    for prompt, a, b in zip(PROMPTS, fast, generic, strict=True):
        for x, y in zip(a, b, strict=True):
            atol = logprob_atol(model, prompt, y.token_ids)
            torch.testing.assert_close(x.logprobs, y.logprobs, atol=atol, rtol=0)


def test_mixed_requests_share_a_batch(model) -> None:
    """Groups with different params decode together; each keeps its own limits."""
    engine = TorchEngine(model)
    batcher = engine.batcher
    greedy = SamplingParams(temperature=0, max_new_tokens=5)
    sampled = SamplingParams(n=3, temperature=1.0, max_new_tokens=9, seed=1, ignore_eos=True)
    t1 = batcher.submit(PROMPTS[0], greedy, seed=0, index=0, stop_ids=engine.stop_ids(greedy))
    t2 = batcher.submit(PROMPTS[1], sampled, seed=1, index=0, stop_ids=[])
    done = {}
    for _ in range(50):
        done.update(batcher.step())
        if not batcher.has_work:
            break
    assert set(done) == {t1, t2}
    assert done[t1][0].token_ids == engine.generate([PROMPTS[0]], greedy)[0][0].token_ids
    assert [len(c.token_ids) for c in done[t2]] == [9, 9, 9]
    assert all(c.finish_reason == "length" for c in done[t2])


def test_abort_all_ends_live_and_waiting_sequences(model) -> None:
    engine = TorchEngine(model, max_batch_size=2)
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=30, seed=0, ignore_eos=True)
    submit = engine.batcher.submit
    tickets = [submit(p, params, seed=0, index=i, stop_ids=[]) for i, p in enumerate(PROMPTS[:3])]
    engine.batcher.step()
    engine.batcher.step()
    done = dict(engine.batcher.abort_all())
    assert set(done) == set(tickets)
    reasons = [c.finish_reason for t in tickets for c in done[t]]
    assert reasons == ["abort"] * 6
    # Step 1 samples the first token at admission and decodes a second; step 2 a third.
    assert [len(c.token_ids) for c in done[tickets[0]]] == [3, 3]
    assert [len(c.token_ids) for c in done[tickets[2]]] == [0, 0]  # never admitted
    assert not engine.batcher.has_work


def test_uniforms_depend_only_on_key_and_step() -> None:
    keys = torch.tensor([sequence_key(7, i, j) for i in range(3) for j in range(4)])
    steps = torch.arange(12)
    u = uniforms(keys, steps)
    assert ((u > 0) & (u < 1)).all()
    assert torch.equal(uniforms(keys[5:6], steps[5:6]), u[5:6])
    assert len(set(keys.tolist())) == 12


def test_groups_submitted_mid_flight_join_and_match_solo_runs(model) -> None:
    """Later groups join a running batch (early slots finish and become holes); every group
    still equals its own solo run."""
    engine = TorchEngine(model, max_batch_size=8)
    batcher = engine.batcher
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=10, seed=4, ignore_eos=True)
    tickets = {batcher.submit(PROMPTS[0], params, seed=4, index=0, stop_ids=[]): 0}
    done = dict(batcher.step())
    done.update(batcher.step())
    for i in range(1, len(PROMPTS)):
        tickets[batcher.submit(PROMPTS[i], params, seed=4, index=i, stop_ids=[])] = i
    for _ in range(100):
        done.update(batcher.step())
        if not batcher.has_work:
            break
    assert set(done) == set(tickets)
    solo = TorchEngine(model, max_batch_size=1).generate(PROMPTS, params)
    for ticket, i in tickets.items():
        assert [c.token_ids for c in done[ticket]] == [c.token_ids for c in solo[i]]


@pytest.mark.parametrize(
    ("dst", "src"),
    [
        ([2, 3, 4, 5, 6, 7], [1, 1, 1, 2, 2, 2]),  # a run of slots, each prompt's samples in a row
        ([2, 3, 4, 5], [0, 2, 2, 1]),  # a run of slots, rows in any order
        ([6, 1, 4], [2, 0, 2]),  # scattered slots (refills into holes)
    ],
)
def test_prompt_caches_land_in_their_slots(dst: list[int], src: list[int]) -> None:
    from operators.rollout.kv_cache import SlotKVCache

    cache = SlotKVCache(2, 2, 4, dtype=torch.float32, device=torch.device("cpu"))
    cache.ensure(8, 16)
    before = [t.clone() for t in cache.kv]
    prompts = [torch.randn(3, 5, 2, 2, 4) for _ in range(2)]  # (prompts, length, k/v, heads, d)
    cache.write(torch.tensor(dst), prompts, torch.tensor(src))
    for layer, kv in enumerate(cache.kv):
        expected = before[layer]
        for slot, row in zip(dst, src, strict=True):
            expected[:, :5, slot] = prompts[layer][row].permute(1, 0, 2, 3)
        torch.testing.assert_close(kv, expected, atol=0, rtol=0)
