"""veRL data as users store it: chat-message prompts, extra columns (`ability`), struct
`extra_info` and a `reward_model` struct with extra fields, through the whole pipeline
(generate, reference log-probs, score, train) under `rldag run`, and through rollout servers;
prompts the tokenizer cannot represent are reported."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from flows.cli import main
from operators.model.prompts import encode_prompt
from operators.score.rewards.arithmetic import compute_score
from rldag.compute.in_process import InProcessPools
from rldag.graph.schema import MESSAGES
from tests.support.pipelines import grpo_nodes
from tests.support.runs import StoredRunView, drive_inline, read_run, run_pipeline, start_run

ITERATIONS = 2


def verl_chat_parquet(tiny_task: Path, out: Path, prompts: list[str] | None = None) -> Path:
    """The tiny task's problems as a veRL file: messages with a system turn, `ability`,
    `reward_model` {ground_truth, style, version}, `extra_info` {split, index, question}."""
    source = pq.read_table(tiny_task / "train.parquet").to_pylist()
    texts = prompts or [row["prompt"] for row in source]
    rows = [
        {
            "data_source": row["data_source"],
            "prompt": [{"role": "system", "content": ""}, {"role": "user", "content": text}],
            "ability": "math",
            "reward_model": {**row["reward_model"], "version": 2},
            "extra_info": {"split": "train", "index": i, "question": text},
        }
        for i, (row, text) in enumerate(zip(source, texts, strict=False))
    ]
    pq.write_table(pa.Table.from_pylist(rows), out)
    return out


def pipeline(tiny_task: Path, data: Path, tmp_path: Path, **generate: object) -> dict:
    model = str(tiny_task / "model")
    return {
        "name": "chat",
        "iterations": ITERATIONS,
        "seed": 1,
        "model": {"path": model},
        "storage": {"uri": f"file://{tmp_path}/runs"},
        "checkpoint": {"export_hf": False},
        "nodes": chat_nodes(model, data, generate),
    }


def chat_nodes(model: str, data: Path, generate: dict) -> dict:
    """GRPO with reference log-probs between generate and score (KL in the loss)."""
    nodes = grpo_nodes(
        model,
        data,
        "operators.score.rewards.arithmetic:compute_score",
        generate={"n": 4, "max_new_tokens": 4, **generate},
        train={"lr": 1e-3, "kl_coef": 0.01},
    )
    nodes["reference"] = {
        "kind": "transform",
        "op": "reference_logprobs",
        "inputs": {"rollouts": "generate"},
        "params": {"model_path": model},
    }
    nodes["score"]["inputs"] = {"rollouts": "reference"}
    return nodes


def _tokenizer(tiny_task: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_task / "model")


def _check_stored_run(run: StoredRunView, tiny_task: Path) -> list[dict]:
    """Every stored row: prompt kept as messages, ids from the chat template, responses the
    decoded ids, rewards the user function's, veRL columns passed through."""
    tok = _tokenizer(tiny_task)
    rows = []
    for i in range(ITERATIONS):
        table = run.table("advantage", i)
        assert table.schema.field("prompt").type == MESSAGES
        for row in table.to_pylist():
            assert row["prompt_ids"] == encode_prompt(tok, row["prompt"])
            assert row["prompt_ids"] == tok(row["prompt"][1]["content"])["input_ids"]
            assert row["response"] == tok.decode(row["response_ids"], skip_special_tokens=True)
            truth = row["ground_truth"]
            assert row["reward"] == compute_score("arithmetic", row["response"], truth, None)
            assert len(row["ref_logprobs"]) == len(row["response_ids"])
            assert row["ability"] == "math"
            info = json.loads(row["extra_info"])
            assert info["question"] == row["prompt"][1]["content"] and info["split"] == "train"
            rows.append(row)
    trained = run.table("train", ITERATIONS - 1)
    assert trained["policy_version"].to_pylist() == [ITERATIONS]
    return rows


def test_verl_chat_dataset_runs_end_to_end_under_rldag_run(
    prefect_api, tiny_task, tmp_path, write_yaml
):
    data = verl_chat_parquet(tiny_task, tmp_path / "chat.parquet")
    path = write_yaml(pipeline(tiny_task, data, tmp_path))
    assert main(["run", str(path)]) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    chat_rows = _check_stored_run(read_run(run_dir), tiny_task)
    assert len(chat_rows) == ITERATIONS * 32 * 4

    # The same problems as plain strings: the template renders each chat prompt to its text,
    # so the same seed samples the same responses.
    plain = tmp_path / "plain"
    doc = pipeline(tiny_task, tiny_task / "train.parquet", plain) | {"ray": {"enabled": False}}
    run = run_pipeline(write_yaml(doc, "plain.yaml"), runner=InProcessPools())
    plain_rows = [row for i in range(ITERATIONS) for row in run.table("advantage", i).to_pylist()]
    key = ("prompt_id", "sample_idx", "prompt_ids", "response", "reward", "policy_version")
    assert [[r[k] for k in key] for r in chat_rows] == [[r[k] for k in key] for r in plain_rows]


def test_chat_prompts_through_rollout_servers(tiny_task, tmp_path, write_yaml):
    data = verl_chat_parquet(tiny_task, tmp_path / "chat.parquet")
    doc = pipeline(tiny_task, data, tmp_path, engine="server", servers=1)
    doc["ray"] = {"enabled": False}
    run = run_pipeline(write_yaml(doc), runner=InProcessPools())
    _check_stored_run(run, tiny_task)


def test_prompts_the_tokenizer_cannot_represent_are_reported(
    tiny_task, tmp_path, write_yaml, caplog
):
    unknown = ["Сколько 3+5="] * 16 + ["3+5="] * 16  # 7 of 11 characters have no token
    data = verl_chat_parquet(tiny_task, tmp_path / "chat.parquet", unknown)
    doc = pipeline(tiny_task, data, tmp_path) | {"ray": {"enabled": False}, "iterations": 1}
    doc["nodes"]["prompts"]["params"] |= {"batch_size": 32, "shuffle": False}
    for name in ("reference", "train"):
        del doc["nodes"][name]
    doc["nodes"]["score"]["inputs"] = {"rollouts": "generate"}
    doc["nodes"]["generate"]["inputs"] = {"prompts": "prompts"}
    run = start_run(write_yaml(doc), runner=InProcessPools())
    with caplog.at_level(logging.WARNING, logger="rldag.ops"):
        drive_inline(run)
    (message,) = [r.getMessage() for r in caplog.records if "cannot represent" in r.getMessage()]
    assert "node 'generate' (iteration 0): 16 of 32 prompts" in message
    assert "64% of their characters lost; first: prompt_id 0" in message
