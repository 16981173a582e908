"""The tiny default task: reward function, tokenizer, model, parquet data, cached atomic build."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from examples.tiny_task import (
    EvalParams,
    TinyTaskParams,
    WarmupParams,
    all_problems,
    build_tiny_task,
    is_built,
)
from examples.tiny_task import build as build_module
from operators.score.rewards.arithmetic import compute_score, extract_answer


@pytest.fixture
def built(tiny_task: Path) -> Path:
    """The session's tiny task (`make model` installed the shipped build)."""
    return tiny_task


# --- reward ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "truth", "score"),
    [
        ("8", "8", 1.0),
        ("17", "17", 1.0),
        ("8<eos>", "8", 1.0),
        ("8<eos><pad><pad>", "8", 1.0),
        ("  8", "8", 1.0),
        ("8 \n", "8", 1.0),
        ("\t12<|endoftext|>", "12", 1.0),
        ("9", "8", 0.0),
        ("1", "12", 0.0),
        ("123", "12", 0.0),
        ("08", "8", 0.0),
        ("", "8", 0.0),
        ("   ", "8", 0.0),
        ("<eos>", "8", 0.0),
        ("8+1", "8", 0.0),
        ("8 is the answer", "8", 0.0),
        ("the answer is 8", "8", 0.0),
        ("8<eos>8", "8", 0.0),
        ("8.0", "8", 0.0),
        ("8 8", "8", 0.0),
    ],
)
def test_reward_hand_cases(response: str, truth: str, score: float) -> None:
    assert compute_score("arithmetic", response, truth) == score


def test_reward_accepts_extra_info_and_returns_float() -> None:
    score = compute_score("arithmetic", "5", "5", extra_info={"split": "train", "index": 23})
    assert isinstance(score, float) and score == 1.0
    assert extract_answer(" 15<eos>") == "15"
    assert extract_answer("15 apples") is None


# --- problems and parquet --------------------------------------------------------------------


def test_problems_are_the_100_single_digit_sums() -> None:
    problems = all_problems()
    assert len({p.prompt for p in problems}) == 100
    assert [p.index for p in problems] == list(range(100))
    assert problems[35].prompt == "3+5=" and problems[35].answer == "8"
    assert problems[99].answer == "18"


@pytest.mark.parametrize("split", ["train", "test"])
def test_parquet_has_verl_columns(built: Path, split: str) -> None:
    table = pq.read_table(built / f"{split}.parquet")
    assert table.column_names == ["prompt", "data_source", "reward_model", "extra_info"]
    assert str(table.schema.field("prompt").type) == "string"
    assert str(table.schema.field("reward_model").type) == (
        "struct<ground_truth: string, style: string>"
    )
    assert str(table.schema.field("extra_info").type) == "struct<split: string, index: int64>"
    rows = table.to_pylist()
    assert len(rows) == 100
    for row, problem in zip(rows, all_problems(), strict=True):
        assert row["prompt"] == problem.prompt
        assert row["data_source"] == "arithmetic"
        assert row["reward_model"] == {"ground_truth": problem.answer, "style": "rule"}
        assert row["extra_info"] == {"split": split, "index": problem.index}


# --- tokenizer and model ---------------------------------------------------------------------


def test_tokenizer_round_trips_and_splits_digits(built: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built / "model")
    assert tok.eos_token == "<eos>" and tok.pad_token == "<pad>"
    assert len({tok.eos_token_id, tok.pad_token_id, tok.bos_token_id}) == 3
    for problem in all_problems():
        text = problem.prompt + problem.answer
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.convert_ids_to_tokens(ids) == list(text)  # one token per character
        assert tok.decode(ids) == text
        assert tok.unk_token_id not in ids
    ids = tok("1234567890+=", add_special_tokens=False)["input_ids"]
    assert len(ids) == 12 and tok.decode(ids) == "1234567890+="
    assert tok.decode([*tok("18")["input_ids"], tok.eos_token_id]) == "18<eos>"


def test_chat_template_yields_the_raw_prompt(built: Path) -> None:
    from transformers import AutoTokenizer

    from operators.model.prompts import encode_prompt

    tok = AutoTokenizer.from_pretrained(built / "model")
    messages = [{"role": "user", "content": "3+5="}]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "3+5="
    assert encode_prompt(tok, messages) == tok("3+5=")["input_ids"]  # the generate node's path


def test_model_loads_and_is_a_tiny_fp32_qwen2(built: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built / "model")
    model = AutoModelForCausalLM.from_pretrained(built / "model")
    config = model.config
    assert config.model_type == "qwen2"
    assert config.num_hidden_layers == 3 and config.hidden_size == 128
    assert config.vocab_size == len(tok)
    assert config.eos_token_id == tok.eos_token_id
    assert all(p.dtype == torch.float32 for p in model.parameters())
    ids = tok(["3+5=", "9+9="], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (2, 4, len(tok))


def test_warmed_up_policy_knows_format_but_is_mostly_wrong(built: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from examples.tiny_task.evaluate import evaluate_policy

    warmup = json.loads((built / "build.json").read_text())["warmup"]
    assert 0.10 <= warmup["accuracy"] <= 0.25
    assert warmup["format_rate"] >= 0.95
    # The saved weights reproduce the recorded numbers (same seeded sampler).
    tok = AutoTokenizer.from_pretrained(built / "model")
    model = AutoModelForCausalLM.from_pretrained(built / "model")
    assert evaluate_policy(model, tok, all_problems(), seed=1)["accuracy"] <= 0.3


# --- build: cache, atomicity, determinism ----------------------------------------------------


def test_build_is_cached(built: Path) -> None:
    stamp = built / "build.json"
    before = (stamp.stat().st_mtime_ns, (built / "model" / "model.safetensors").stat().st_ino)
    assert is_built(built)
    start = time.perf_counter()
    assert build_tiny_task(built) == built
    assert time.perf_counter() - start < 1.0
    assert before == (stamp.stat().st_mtime_ns, (built / "model/model.safetensors").stat().st_ino)
    other = TinyTaskParams(eval=EvalParams(seed=1))
    assert not is_built(built, other)


def test_failed_build_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(root: Path, params: TinyTaskParams) -> dict:
        (root / "model").mkdir()
        raise RuntimeError("killed mid-build")

    monkeypatch.setattr(build_module, "_build_into", boom)
    with pytest.raises(RuntimeError, match="killed"):
        build_tiny_task(tmp_path / "task", force=True)  # trains from the recipe
    assert list(tmp_path.iterdir()) == []


def test_refuses_to_replace_a_foreign_directory(tmp_path: Path) -> None:
    foreign = tmp_path / "task"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep me")
    staged = tmp_path / "staged"
    staged.mkdir()
    with pytest.raises(FileExistsError):
        build_module._move_into_place(staged, foreign)
    assert (foreign / "precious.txt").read_text() == "keep me"


def test_outdated_build_is_replaced_whole(tmp_path: Path) -> None:
    out = tmp_path / "task"
    out.mkdir()
    (out / "build.json").write_text(json.dumps({"builder": "examples.tiny_task", "version": 0}))
    (out / "stale.txt").write_text("old")
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "build.json").write_text("{}")
    build_module._move_into_place(staged, out)
    assert sorted(p.name for p in out.iterdir()) == ["build.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["task"]


def test_a_rebuild_is_bit_identical_on_one_machine(built: Path, tmp_path: Path) -> None:
    """Two trainings from the recipe (a short warm-up) give the same bytes here; the
    tokenizer, config and data, which no float kernel touches, are the shipped ones."""
    params = TinyTaskParams(warmup=WarmupParams(steps=5))
    one = build_tiny_task(tmp_path / "one", params=params)
    two = build_tiny_task(tmp_path / "two", params=params, force=True)
    assert (one / "SHA256SUMS").read_text() == (two / "SHA256SUMS").read_text()
    for name in ["model/tokenizer.json", "model/config.json"]:
        assert (one / name).read_bytes() == (built / name).read_bytes(), name
    for split in ["train", "test"]:
        assert pq.read_table(one / f"{split}.parquet").equals(
            pq.read_table(built / f"{split}.parquet")
        )
