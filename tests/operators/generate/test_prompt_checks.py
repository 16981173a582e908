"""Prompts longer than the model's context are named by prompt_id before generating
(operators/rollout/prompt_checks.py, for the generate operator to call)."""

from __future__ import annotations

import json

import pytest

from operators.generate.prompt_checks import check_prompt_lengths, model_context
from rldag.config.errors import RowError


def test_model_context_is_the_configs_max_position_embeddings(tiny_task, tmp_path):
    from transformers import AutoConfig

    model = tiny_task / "model"
    assert model_context(model) == AutoConfig.from_pretrained(model).max_position_embeddings
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"n_positions": 4096}}))
    assert model_context(tmp_path) == 4096  # multimodal configs nest the text model's
    assert model_context(tmp_path / "missing") is None


def test_a_prompt_too_long_for_the_context_is_named_by_prompt_id(tiny_task):
    from transformers import AutoTokenizer

    model = tiny_task / "model"
    tokenizer = AutoTokenizer.from_pretrained(model)
    context = model_context(model)
    ids = [tokenizer(p)["input_ids"] for p in ("1+2=", "1+2=" * 40, "3+4=" * 40)]
    assert len(ids[1]) > context  # the prompt alone does not fit
    with pytest.raises(RowError) as info:
        check_prompt_lengths(ids, 4, context, "generate", 3, [10, 11, 12])
    message = str(info.value)
    assert (
        f"node 'generate' iteration 3, prompt_id 11: the prompt has {len(ids[1])} tokens" in message
    )
    assert f"needs {len(ids[1]) + 4} positions; the model's context is {context}" in message
    assert "(2 of 3 prompts of this batch are too long)" in message
    assert "nodes.generate.params.max_new_tokens" in message
    check_prompt_lengths(ids[:1], 4, context, "generate", 3, [10])  # a short one passes


def test_prompt_and_new_tokens_must_fit_together():
    fits = [[1] * 60]
    check_prompt_lengths(fits, 4, 64, "generate", 0, [7])  # 60 + 4 = 64 positions
    with pytest.raises(RowError, match="prompt_id 7: the prompt has 60 tokens"):
        check_prompt_lengths(fits, 5, 64, "generate", 0, [7])
    check_prompt_lengths([[1] * 1000], 16, None, "generate", 0, [7])  # unknown context
