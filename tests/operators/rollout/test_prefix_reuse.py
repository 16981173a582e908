"""A caller's next turn reuses its previous sequence's cache: the same samples as a full
prefill, bounded memory, nothing reused across weights."""

from __future__ import annotations

import pytest
import torch

from operators.rollout import SamplingParams, TorchEngine
from operators.rollout.decoder import make_decoder
from operators.rollout.prefix_store import Kept, PrefixStore, shared_prefix
from tests.support.tiny_models import random_causal_lm

PARAMS = SamplingParams(temperature=1.0, max_new_tokens=6, seed=7)
ENV = [[5, 6, 7], [9], [11, 12, 13, 14]]  # what an environment appends after each turn


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return random_causal_lm()


def _complete(engine: TorchEngine, prompt: list[int], key: str | None, index: int = 0):
    engine.batcher.submit(prompt, PARAMS, seed=3, index=index, stop_ids=[], cache_key=key)
    done = []
    while engine.batcher.has_work:
        done += engine.batcher.step()
    ((_, (completion,)),) = done
    return completion


def _episode(engine: TorchEngine, key: str | None, index: int = 0) -> list:
    """Three turns, each prompted with the whole context so far (as an agent does)."""
    context, turns = [1, 2, 3, 4], []
    for env in ENV:
        completion = _complete(engine, context, key, index)
        turns.append(completion)
        context = context + completion.token_ids + env
    return turns


@pytest.mark.parametrize("kind", ["fast", "hf"])
def test_extending_a_cached_prefix_computes_what_a_full_prefill_computes(model, kind) -> None:
    decoder = make_decoder(model, kind)
    sequences = [[1, 2, 3, 4, 5, 6, 7], [9, 8, 7, 6, 5, 4, 3, 2, 1, 10], [4, 4]]
    cut = [3, 6, 1]
    with torch.inference_mode():
        full = decoder.prefill(sequences)
        head = decoder.prefill([s[:c] for s, c in zip(sequences, cut, strict=True)])
        pasts = [[kv[row, :c] for kv in head.kv] for row, c in enumerate(cut)]
        tails = [s[c:] for s, c in zip(sequences, cut, strict=True)]
        extended = decoder.extend(pasts, tails)
    assert extended.lengths == full.lengths
    torch.testing.assert_close(extended.logits, full.logits, atol=1e-5, rtol=0)
    for row, sequence in enumerate(sequences):
        for got, want in zip(extended.kv, full.kv, strict=True):
            torch.testing.assert_close(got[row, : len(sequence)], want[row, : len(sequence)])


def test_turns_that_reuse_the_kept_cache_sample_what_full_prefills_sample(model) -> None:
    reused, full = TorchEngine(model), TorchEngine(model)
    with_cache, without = _episode(reused, "episode"), _episode(full, None)
    assert [c.token_ids for c in with_cache] == [c.token_ids for c in without]
    for got, want in zip(with_cache, without, strict=True):
        torch.testing.assert_close(got.logprobs, want.logprobs, atol=1e-5, rtol=0)
    # turns 2 and 3 reused their previous context: all of it but its last sampled token
    shared = [4 + len(without[0].token_ids) - 1]
    shared.append(shared[0] + 1 + len(ENV[0]) + len(without[1].token_ids) - 1)
    assert reused.batcher.reused_tokens == sum(shared)
    assert full.batcher.reused_tokens == 0
    assert len(reused.batcher.kept) == 1  # the last turn's, until the caller releases it
    reused.batcher.release("episode")
    assert len(reused.batcher.kept) == 0 and reused.batcher.kept.tokens == 0


def test_a_prompt_that_leaves_the_kept_tokens_reuses_only_the_shared_part(model) -> None:
    engine, fresh = TorchEngine(model), TorchEngine(model)
    first = _complete(engine, [1, 2, 3, 4, 5, 6], "k")
    changed = [1, 2, 9, 4, 5, 6, *first.token_ids]  # differs from the kept ids at position 2
    got, want = _complete(engine, changed, "k"), _complete(fresh, changed, None)
    assert engine.batcher.reused_tokens == 2
    assert got.token_ids == want.token_ids


def test_new_weights_drop_every_kept_cache(model) -> None:
    engine = TorchEngine(random_causal_lm())
    _complete(engine, [1, 2, 3], "a")
    _complete(engine, [4, 5, 6], "b")
    assert len(engine.batcher.kept) == 2
    engine.load_state_dict(model.state_dict())
    assert len(engine.batcher.kept) == 0
    _complete(engine, [4, 5, 6], "b")
    engine.batcher.new_weights("2")
    assert len(engine.batcher.kept) == 0


def _kept(n: int) -> Kept:
    return Kept(list(range(n)), [torch.zeros(n, 2, 1, 1)])


def test_the_store_evicts_the_oldest_entries_beyond_its_token_budget() -> None:
    store = PrefixStore(max_tokens=10)
    store.keep("a", _kept(4))
    store.keep("b", _kept(4))
    store.keep("a", _kept(3))  # replaces a, which is now the newest
    assert store.tokens == 7
    store.keep("c", _kept(5))  # 12 > 10: b, the oldest, goes
    assert store.take("b") is None
    assert store.tokens == 8 and len(store) == 2
    store.keep("d", _kept(11))  # larger than the budget: not kept, nothing evicted for it
    assert store.take("d") is None and len(store) == 2
    assert store.take("a").tokens == [0, 1, 2]
    assert store.tokens == 5


def test_shared_prefix_counts_the_leading_ids_in_common() -> None:
    assert shared_prefix([1, 2, 3], [1, 2, 3, 4]) == 3
    assert shared_prefix([1, 2, 3], [1, 5, 3]) == 1
    assert shared_prefix([], [1]) == 0
    assert shared_prefix([2], [1]) == 0
