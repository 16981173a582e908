"""Tests for the torch rollout engine: parity with HF generate, logprobs, seeds, stops, weights."""

from __future__ import annotations

import pytest
import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

from operators.rollout import Completion, SamplingParams, TorchEngine
from tests.support.tiny_models import VOCAB, random_causal_lm
from tests.support.tolerances import logprob_atol, teacher_forced_logprobs

PROMPTS = [[1, 2, 3], [5, 6, 7, 8, 9, 10, 11], [4], [7, 7, 12, 40]]
CHARS = "abcdefghijklmnopqrstuvwxyz0123456789 .,!?-+*/=()[]{}<>:;'\"#$%&@^~"[: VOCAB - 2]


@pytest.fixture(scope="module")
def qwen() -> torch.nn.Module:
    return random_causal_lm(0)


@pytest.fixture(scope="module")
def llama() -> torch.nn.Module:
    return random_causal_lm(1, transformers.LlamaConfig)


@pytest.fixture(scope="module")
def char_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """One character per token (ids 0..61), plus <pad>=62 and <eos>=63."""
    vocab = {ch: i for i, ch in enumerate(CHARS)} | {"<pad>": VOCAB - 2, "<eos>": VOCAB - 1}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>"
    )


def _hf_greedy(model: torch.nn.Module, prompt: list[int], max_new: int) -> list[int]:
    out = model.generate(
        torch.tensor([prompt]),
        attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        do_sample=False,
        max_new_tokens=max_new,
        pad_token_id=0,
    )
    return out[0, len(prompt) :].tolist()


def _tokens(results: list[list[Completion]]) -> list[list[list[int]]]:
    return [[c.token_ids for c in group] for group in results]


@pytest.mark.parametrize("name", ["qwen", "llama"])
def test_greedy_matches_hf_generate(name: str, request: pytest.FixtureRequest) -> None:
    model = request.getfixturevalue(name)
    engine = TorchEngine(model)
    results = engine.generate(PROMPTS, SamplingParams(temperature=0, max_new_tokens=10))
    for prompt, group in zip(PROMPTS, results, strict=True):
        assert len(group) == 1
        c = group[0]
        assert c.token_ids == _hf_greedy(model, prompt, 10)  # HF also stops at eos
        stopped = c.token_ids[-1] in engine.eos_token_ids  # LlamaConfig has eos 2
        assert c.finish_reason == ("stop" if stopped else "length")
        assert stopped or len(c.token_ids) == 10
    # HF's own left-padded batch agrees too.
    width = max(map(len, PROMPTS))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in PROMPTS])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in PROMPTS])
    batch = model.generate(
        ids, attention_mask=mask, do_sample=False, max_new_tokens=10, pad_token_id=0
    )
    for row, group in zip(batch[:, width:].tolist(), results, strict=True):
        assert row[: len(group[0].token_ids)] == group[0].token_ids


@pytest.mark.parametrize("path", ["elementwise", "sdpa"])
def test_decode_attention_paths_match_hf(
    qwen: torch.nn.Module, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Short spans attend elementwise over the position-major cache, long ones through SDPA;
    both give HF's greedy tokens (GQA model, prompts of different lengths in one batch)."""
    from operators.rollout import llama_decoder

    if path == "sdpa":
        monkeypatch.setattr(llama_decoder, "ELEMENTWISE_LIMIT", 0)
    results = TorchEngine(qwen).generate(PROMPTS, SamplingParams(temperature=0, max_new_tokens=12))
    for prompt, group in zip(PROMPTS, results, strict=True):
        assert group[0].token_ids == _hf_greedy(qwen, prompt, 12)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_match_teacher_forcing(qwen: torch.nn.Module, temperature: float) -> None:
    params = SamplingParams(n=3, temperature=temperature, max_new_tokens=8, seed=0, top_k=20)
    results = TorchEngine(qwen).generate(PROMPTS, params)
    for prompt, group in zip(PROMPTS, results, strict=True):
        assert len(group) == 3
        for c in group:
            assert len(c.token_ids) == len(c.logprobs) == 8
            ref = teacher_forced_logprobs(qwen, prompt, c.token_ids, temperature)
            atol = logprob_atol(qwen, prompt, c.token_ids, temperature)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=atol, rtol=0)


def test_greedy_logprobs_are_untempered(qwen: torch.nn.Module) -> None:
    (group,) = TorchEngine(qwen).generate([PROMPTS[1]], SamplingParams(n=2, temperature=0))
    assert group[0] == group[1] and group[0] is not group[1]
    ref = teacher_forced_logprobs(qwen, PROMPTS[1], group[0].token_ids, 1.0)
    atol = logprob_atol(qwen, PROMPTS[1], group[0].token_ids, 1.0)
    torch.testing.assert_close(torch.tensor(group[0].logprobs), ref, atol=atol, rtol=0)


def test_seed_determinism(qwen: torch.nn.Module) -> None:
    engine = TorchEngine(qwen)
    params = SamplingParams(n=4, temperature=1.0, top_p=0.9, max_new_tokens=8, seed=123)
    first = _tokens(engine.generate(PROMPTS, params))
    assert _tokens(engine.generate(PROMPTS, params)) == first
    other = SamplingParams(n=4, temperature=1.0, top_p=0.9, max_new_tokens=8, seed=124)
    assert _tokens(engine.generate(PROMPTS, other)) != first
    # Samples within a group differ (they share the prefill, not the randomness).
    assert len({tuple(t) for t in first[1]}) > 1


def test_groups_in_order_across_chunks(qwen: torch.nn.Module) -> None:
    """Small max_batch_size splits groups over chunks; every sample belongs to its own prompt."""
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=6, seed=7)
    results = TorchEngine(qwen, max_batch_size=2).generate(PROMPTS, params)
    assert [len(g) for g in results] == [3] * len(PROMPTS)
    for prompt, group in zip(PROMPTS, results, strict=True):
        for c in group:
            ref = teacher_forced_logprobs(qwen, prompt, c.token_ids, 1.0)
            atol = logprob_atol(qwen, prompt, c.token_ids, 1.0)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=atol, rtol=0)
    greedy = SamplingParams(temperature=0, max_new_tokens=6)
    small = TorchEngine(qwen, max_batch_size=1).generate(PROMPTS, greedy)
    assert _tokens(small) == _tokens(TorchEngine(qwen).generate(PROMPTS, greedy))


def test_batch_independence(qwen: torch.nn.Module) -> None:
    engine = TorchEngine(qwen)
    params = SamplingParams(temperature=0, max_new_tokens=10)
    (alone,) = engine.generate([PROMPTS[0]], params)
    together = engine.generate([PROMPTS[1], PROMPTS[0], PROMPTS[2]], params)[1]
    assert together[0].token_ids == alone[0].token_ids
    torch.testing.assert_close(together[0].logprobs, alone[0].logprobs, atol=1e-5, rtol=0)


def test_stop_token_ids_and_eos(qwen: torch.nn.Module) -> None:
    params = SamplingParams(temperature=0, max_new_tokens=12)
    (full,) = TorchEngine(qwen).generate([PROMPTS[0]], params)
    tokens = full[0].token_ids
    stop_tok = tokens[4]
    cut = tokens.index(stop_tok) + 1
    stop_params = SamplingParams(temperature=0, max_new_tokens=12, stop_token_ids=(stop_tok,))
    results = TorchEngine(qwen).generate([PROMPTS[0], PROMPTS[1]], stop_params)
    c = results[0][0]
    assert c.token_ids == tokens[:cut] and c.finish_reason == "stop"
    assert c.logprobs == pytest.approx(full[0].logprobs[:cut], abs=1e-5)
    # The other sequence keeps decoding after the first one finished.
    other = TorchEngine(qwen).generate([PROMPTS[1]], params)[0][0].token_ids
    if stop_tok in other:
        assert results[1][0].token_ids == other[: other.index(stop_tok) + 1]
    else:
        assert results[1][0].token_ids == other and results[1][0].finish_reason == "length"
    # The same token as the model's eos id.
    model = random_causal_lm(0)
    model.generation_config.eos_token_id = [stop_tok]
    (eos,) = TorchEngine(model).generate([PROMPTS[0]], params)
    assert eos[0].token_ids == tokens[:cut] and eos[0].finish_reason == "stop"
    assert eos[0].token_ids == _hf_greedy(model, PROMPTS[0], 12)


def test_stop_strings_and_text(qwen: torch.nn.Module, char_tokenizer) -> None:
    engine = TorchEngine(qwen, char_tokenizer)
    prompt = char_tokenizer.encode("hello")
    params = SamplingParams(temperature=0, max_new_tokens=12)
    (full,) = engine.generate([prompt], params)
    text = full[0].text
    assert text == char_tokenizer.decode(full[0].token_ids, skip_special_tokens=True)
    assert len(text) == 12 and full[0].finish_reason == "length"  # no special tokens sampled
    stop = text[5:7]
    start = text.index(stop)
    (cut,) = engine.generate([prompt], SamplingParams(temperature=0, max_new_tokens=12, stop=stop))
    assert cut[0].finish_reason == "stop"
    assert cut[0].text == text[:start]
    assert cut[0].token_ids == full[0].token_ids[: start + len(stop)]
    assert len(cut[0].logprobs) == start + len(stop)


def test_tokenizer_eos_stops(qwen: torch.nn.Module, char_tokenizer) -> None:
    model = random_causal_lm(0)
    (full,) = TorchEngine(model).generate([[3, 1]], SamplingParams(temperature=0))
    # Make the tokenizer's eos the token greedy emits at step `eos_at`: swap the lm_head rows.
    # Sound where that token was not emitted before and eos was not emitted up to there.
    ids, eos = full[0].token_ids, char_tokenizer.eos_token_id
    eos_at = next(
        (k for k in range(1, len(ids)) if ids[k] not in ids[:k] and eos not in ids[: k + 1]), None
    )
    assert eos_at is not None, f"greedy output {ids} has no position to make the eos"
    target = ids[eos_at]
    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head[[target, eos]] = head[[eos, target]]
    (out,) = TorchEngine(model, char_tokenizer).generate([[3, 1]], SamplingParams(temperature=0))
    assert out[0].token_ids[-1] == eos and len(out[0].token_ids) == eos_at + 1
    assert out[0].finish_reason == "stop" and out[0].text is not None


def test_load_state_dict(qwen: torch.nn.Module) -> None:
    other = random_causal_lm(5)
    engine = TorchEngine(random_causal_lm(0))
    params = SamplingParams(temperature=0, max_new_tokens=10)
    before = _tokens(engine.generate(PROMPTS, params))
    engine.load_state_dict({k: v.clone() for k, v in other.state_dict().items()})
    after = engine.generate(PROMPTS, params)
    assert _tokens(after) != before
    for prompt, group in zip(PROMPTS, after, strict=True):
        assert group[0].token_ids == _hf_greedy(other, prompt, 10)
    assert set(engine.state_dict()) == set(other.state_dict())
    with pytest.raises(KeyError):
        engine.load_state_dict({"nope.weight": torch.zeros(1)})


def test_params_validation(qwen: torch.nn.Module) -> None:
    assert SamplingParams(stop=["a", "b"], stop_token_ids=[1]).stop == ("a", "b")
    with pytest.raises(ValueError):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError):
        TorchEngine(qwen).generate([[1]], SamplingParams(stop=("x",)))
    with pytest.raises(ValueError):
        TorchEngine(qwen).generate([[]], SamplingParams())


@pytest.mark.parametrize("min_rows", [1, 10**9])
def test_onednn_matmuls_keep_logprobs_and_seeds(
    qwen: torch.nn.Module, min_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Matmuls of many rows take oneDNN's kernel (here every matmul, ``min_rows`` 1) or never:
    log-probs still match teacher forcing within rounding, and a seed still fixes the samples."""
    from operators.model import cpu_linear

    monkeypatch.setattr(cpu_linear, "ONEDNN_MIN_ROWS", min_rows)
    params = SamplingParams(n=24, temperature=1.0, max_new_tokens=6, seed=3)  # 96 rows
    engine = TorchEngine(qwen)
    results = engine.generate(PROMPTS, params)
    assert _tokens(engine.generate(PROMPTS, params)) == _tokens(results)
    for prompt, group in zip(PROMPTS, results, strict=True):
        for c in group[::12]:
            ref = teacher_forced_logprobs(qwen, prompt, c.token_ids)
            atol = logprob_atol(qwen, prompt, c.token_ids)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=atol, rtol=0)
