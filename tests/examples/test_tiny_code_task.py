"""The tiny code task: problems and tests, character-level tokenizer, parquet data, cached build.

The build here uses a 2-step warm-up (seconds); the default build is exercised by the slow
example-pipeline test in test_code_example.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from examples.tiny_task import (
    CodeTaskParams,
    EvalParams,
    TinyTaskParams,
    build_tiny_task,
    is_built,
    read_stamp,
)
from examples.tiny_task import build as build_module
from examples.tiny_task.coding import CodeWarmupParams, all_code_problems
from examples.tiny_task.coding.problems import corpus_lines
from examples.tiny_task.coding.tokenizer import ALPHABET, train_char_tokenizer
from operators.sandbox import Job, Sandbox, SandboxLimits, TestSpec, extract_program

QUICK = CodeTaskParams(
    warmup=CodeWarmupParams(steps=2),
    eval=EvalParams(samples_per_problem=1, max_new_tokens=8),
)


@pytest.fixture(scope="module")
def quick_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A code-task build with a 2-step warm-up, once for this module."""
    return build_tiny_task(tmp_path_factory.mktemp("tiny_code") / "task", params=QUICK)


def _texts() -> list[str]:
    problems = all_code_problems()
    return [p.prompt for p in problems] + [p.answer for p in problems] + [ALPHABET]


# --- problems ---------------------------------------------------------------------------------


def test_twenty_problems_with_two_or_three_assert_tests() -> None:
    problems = all_code_problems()
    assert len(problems) == 20 and [p.index for p in problems] == list(range(20))
    assert len({p.name for p in problems}) == 20
    add = problems[0]
    assert add.prompt == "Write a Python function add(a, b) that returns a + b.\n"
    assert add.answer == "```python\ndef add(a, b):\n    return a + b\n```"
    assert extract_program(add.answer) == add.program
    for p in problems:
        spec = TestSpec.parse(p.ground_truth)
        assert spec is not None and spec.asserts == p.ground_truth
        assert 2 <= p.ground_truth.count("assert ") <= 3
        assert p.signature in p.prompt and p.program.startswith(f"def {p.signature}:")


def test_reference_solutions_pass_their_tests_in_the_sandbox() -> None:
    problems = all_code_problems()
    jobs = [Job(extract_program(p.answer), TestSpec.parse(p.ground_truth)) for p in problems]
    with Sandbox(SandboxLimits(wall_seconds=2, cpu_seconds=2), concurrency=2) as sandbox:
        results = sandbox.run_many(jobs)
    assert [r.exec_status for r in results] == ["ok"] * 20
    assert all(r.passed for r in results), [(r.tests_passed, r.tests_total) for r in results]
    wrong = Job("def add(a, b):\n    return a - b\n", TestSpec.parse(problems[0].ground_truth))
    with Sandbox(SandboxLimits(wall_seconds=2, cpu_seconds=2), concurrency=1) as sandbox:
        result = sandbox.run_many([wrong])[0]
    assert (result.tests_passed, result.tests_total) == (1, 3)  # only add(0, 0) == 0


# --- tokenizer ---------------------------------------------------------------------------------


def test_char_tokenizer_round_trips_one_token_per_character(tmp_path: Path) -> None:
    from transformers import AutoTokenizer, Qwen2Config

    trained = train_char_tokenizer(corpus_lines())
    trained.save_pretrained(tmp_path)
    Qwen2Config(vocab_size=len(trained)).save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)  # what the pipeline's nodes load
    assert len(trained) == len(loaded) == len(ALPHABET) + 4
    for tok in (trained, loaded):
        specials = [tok.pad_token, tok.eos_token, tok.bos_token, tok.unk_token]
        assert specials == ["<pad>", "<eos>", "<bos>", "<unk>"]
        assert tok.convert_tokens_to_ids(specials) == [0, 1, 2, 3]
        for text in [*_texts(), "x = 1  \n\n\tprint(f'{x!r}')  # ~done\n"]:
            ids = tok(text)["input_ids"]
            assert len(ids) == len(text), text  # one token per character, nothing added
            assert tok.unk_token_id not in ids
            assert tok.decode(ids) == text
        ids = tok("1234567890")["input_ids"]
        assert len(set(ids)) == 10 and tok.decode(ids) == "1234567890"
        ab_eos = [*tok("ab")["input_ids"], tok.eos_token_id]
        assert tok.decode(ab_eos) == "ab<eos>"
        assert tok.decode(ab_eos, skip_special_tokens=True) == "ab"
    for text in _texts():
        assert trained(text)["input_ids"] == loaded(text)["input_ids"]


def test_char_tokenizer_chat_template_yields_the_raw_prompt() -> None:
    tok = train_char_tokenizer(corpus_lines())
    prompt = all_code_problems()[3].prompt
    messages = [{"role": "user", "content": prompt}]
    assert tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) == prompt


def test_char_tokenizer_is_deterministic() -> None:
    first = train_char_tokenizer(corpus_lines()).backend_tokenizer.to_str()
    assert train_char_tokenizer(reversed(corpus_lines())).backend_tokenizer.to_str() == first


# --- build: data, model, cache -------------------------------------------------------------


@pytest.mark.parametrize("split", ["train", "test"])
def test_code_parquet_has_verl_columns(quick_build: Path, split: str) -> None:
    table = pq.read_table(quick_build / f"{split}.parquet")
    assert table.column_names == ["prompt", "data_source", "reward_model", "extra_info"]
    rows = table.to_pylist()
    assert len(rows) == 20
    for row, problem in zip(rows, all_code_problems(), strict=True):
        assert row["prompt"] == [{"role": "user", "content": problem.prompt}]  # veRL chat
        assert row["data_source"] == "code"
        assert row["reward_model"] == {"ground_truth": problem.ground_truth, "style": "rule"}
        assert row["extra_info"] == {"split": split, "index": problem.index}


def test_code_model_is_the_tiny_qwen2_over_the_char_vocabulary(quick_build: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(quick_build / "model")
    tok = AutoTokenizer.from_pretrained(quick_build / "model")
    assert config.model_type == "qwen2" and config.num_hidden_layers == 3
    assert config.hidden_size == 128 and config.max_position_embeddings == 256
    assert config.vocab_size == len(tok) == len(ALPHABET) + 4
    assert config.eos_token_id == tok.eos_token_id and config.pad_token_id == tok.pad_token_id
    stamp = read_stamp(quick_build)
    assert stamp is not None and stamp["task"] == "code" and stamp["problems"] == 20
    warmup = stamp["warmup"]
    assert {"format_rate", "syntax_rate", "exact_rate", "samples"} <= set(warmup)
    assert len(warmup["samples"]) == 3


def test_code_build_is_cached_and_keyed_by_task(quick_build: Path) -> None:
    stamp = quick_build / "build.json"
    before = (stamp.stat().st_mtime_ns, (quick_build / "model/model.safetensors").stat().st_ino)
    assert is_built(quick_build, QUICK)
    start = time.perf_counter()
    assert build_tiny_task(quick_build, params=QUICK) == quick_build
    assert time.perf_counter() - start < 1.0
    after = (stamp.stat().st_mtime_ns, (quick_build / "model/model.safetensors").stat().st_ino)
    assert before == after
    assert not is_built(quick_build)  # the addition task's defaults
    assert not is_built(quick_build, CodeTaskParams())  # the code task's defaults
    assert not is_built(quick_build, TinyTaskParams())


def test_addition_cache_key_is_unchanged() -> None:
    key = build_module.cache_key(TinyTaskParams())
    assert set(key) == {"builder", "version", "params"}
    assert key["builder"] == "operators.tiny_task" and key["version"] == 1  # as shipped
    code = build_module.cache_key(CodeTaskParams())
    assert code["task"] == "code" and json.dumps(code) != json.dumps(key)


def test_unknown_task_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        build_tiny_task(tmp_path / "task", task="nope")
    assert list(tmp_path.iterdir()) == []
