"""The engine loop under continuous generation: a later call's prompts take the slots an
earlier call's finished sequences free, and weights that arrive mid-sequence (``keep``) load
between two steps while every sequence goes on with its cache, each token's log-prob the one
it was sampled with under the versions it records."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
import torch

from operators.rollout import SamplingParams, TorchEngine
from operators.rollout.engine_loop import EngineLoop, GenerateItem
from operators.rollout.weight_update import InFlight, PauseMode
from tests.operators.rollout.test_inflight_updates import _wait_until_decoding
from tests.support.tiny_models import random_causal_lm


def _completion_order(calls: dict[str, list[Future]]) -> list[str]:
    """Which call's item finished when ("a0", "b2", ...), in order."""
    order: list[str] = []
    for name, futures in calls.items():
        for i, future in enumerate(futures):
            future.add_done_callback(lambda _, tag=f"{name}{i}": order.append(tag))
    return order


def test_a_later_call_takes_the_slots_an_earlier_calls_finished_sequences_free() -> None:
    """Four slots: call A holds three short sequences and a long one; call B's three prompts
    decode in the slots the short ones free, and finish while A's long sequence still runs."""
    loop = EngineLoop(TorchEngine(random_causal_lm(0), max_batch_size=4))
    try:
        short = SamplingParams(max_new_tokens=2, ignore_eos=True, seed=1)
        long = SamplingParams(max_new_tokens=48, ignore_eos=True, seed=1)
        a = [GenerateItem([1, 2, 3], long if i == 0 else short, 1, i) for i in range(4)]
        b = [GenerateItem([4, 5, 6], short, 2, i) for i in range(3)]
        loop.pause(PauseMode.in_place).result(timeout=60)  # both calls queue before a step
        first, second = loop.generate_each(a), loop.generate_each(b)
        order = _completion_order({"a": first, "b": second})
        loop.resume().result(timeout=60)
        (long_out,), version = first[0].result(timeout=60)
        assert order[-1] == "a0" and set(order[:-1]) == {"a1", "a2", "a3", "b0", "b1", "b2"}
        assert len(long_out.token_ids) == 48 and version == "0"
        assert loop.engine.batcher.busy_slot_s > 0
    finally:
        loop.close()


def _recomputed_logprobs(prompt: list[int], out: list[int], switch: int) -> list[float]:
    """Log-probs of `out` with tokens [0, switch) from version 0 and the rest from version 1
    on top of version 0's cache of everything before the token fed at the switch."""
    model = random_causal_lm(0)
    with torch.no_grad():
        before = model(torch.tensor([prompt + out[: switch - 1]]), use_cache=True)
        old = torch.log_softmax(before.logits[0, len(prompt) - 1 :].float(), -1)
        model.load_state_dict(random_causal_lm(5).state_dict())
        after = model(torch.tensor([out[switch - 1 : -1]]), past_key_values=before.past_key_values)
        new = torch.log_softmax(after.logits[0].float(), -1)
    logits = torch.cat([old, new])
    return logits[torch.arange(len(out)), torch.tensor(out)].tolist()


def test_weights_kept_mid_sequence_record_both_versions_and_the_sampled_logprobs() -> None:
    loop = EngineLoop(TorchEngine(random_causal_lm(0)))
    try:
        prompt, n = [3, 1, 4, 1, 5], 64
        params = SamplingParams(max_new_tokens=n, ignore_eos=True, seed=7)
        (future,) = loop.generate_each([GenerateItem(prompt, params, 7, 0)])
        _wait_until_decoding(loop, tokens=4)
        state = random_causal_lm(5).state_dict()
        ok, _, held = loop.update_weights(state, "1", InFlight.keep).result(timeout=60)
        assert ok and held == 1  # loaded at once, the request still in flight
        (completion,), version = future.result(timeout=60)
    finally:
        loop.close()
    assert version == "1" and [v for _, v in completion.versions] == ["0", "1"]
    switch = completion.versions[1][0]
    assert 0 < switch < n  # the update came while it decoded
    recomputed = _recomputed_logprobs(prompt, completion.token_ids, switch)
    assert completion.logprobs == pytest.approx(recomputed, abs=1e-4)
