"""A new user's own things, built in the test: their random-init Llama with a byte-level BPE
tokenizer (with or without a chat template), their package of reward code in a temp dir, their
data files and their pipeline; and the check that a mistake in them is refused as bad input
(exit 2, one message naming the file, the key and what was found, nothing written)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from tests.support.paths import ROOT
from tests.support.pipelines import grpo_nodes
from tests.support.tiny_models import save_with_random_lm

# A Llama-3-style template (system, user, assistant turns); tools are listed when given.
CHAT_TEMPLATE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>{% endif %}"
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# The same without the tools: a template copied from a model that had none.
NO_TOOLS_TEMPLATE = CHAT_TEMPLATE.split("{% endif %}", 1)[1]
VERL_REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """1.0 when the answer is right."""
    return float(solution_str.strip() == str(ground_truth).strip())
'''


def build_model(out: Path, chat_template: str | None = CHAT_TEMPLATE) -> Path:
    """A 2-layer random-init Llama and a byte-level BPE tokenizer (eos, pad, and the chat
    template if given) saved as a Hugging Face directory."""
    import transformers
    from tokenizers import ByteLevelBPETokenizer

    raw = ByteLevelBPETokenizer()
    corpus = [f"{a}+{b}={a + b}" for a in range(20) for b in range(20)]
    raw.train_from_iterator(corpus, vocab_size=300, special_tokens=["<|end|>", "<|pad|>"])
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=raw._tokenizer, eos_token="<|end|>", pad_token="<|pad|>"
    )
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return save_with_random_lm(
        out,
        tokenizer,
        transformers.LlamaConfig,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )


def user_package(root: Path, files: dict[str, str], name: str = "mypkg") -> Path:
    """The user's package `name` under `root` with `files` (module file name -> source)."""
    package = root / name
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    for file, source in files.items():
        (package / file).write_text(source)
    return root


def jsonl(path: Path, rows: list[dict]) -> Path:
    """A JSONL data file (GSM8K-style rows, say)."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def sums(n: int = 8) -> list[dict]:
    """GSM8K-style rows: `question`-like prompts under `prompt` and the answer under `answer`."""
    return [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(n)]


def verl_parquet(path: Path, rows: list[dict]) -> Path:
    """A veRL-style parquet: chat-message prompts, `data_source`, extra columns."""
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def chat_rows(n: int = 8, with_answer: bool = True) -> list[dict]:
    """veRL rows with chat-message prompts (and `reward_model.ground_truth` if asked)."""
    rows = []
    for i in range(n):
        row: dict = {
            "data_source": "sums",
            "prompt": [{"role": "user", "content": f"{i}+{i}="}],
            "ability": "math",
        }
        if with_answer:
            row["reward_model"] = {"ground_truth": str(2 * i), "style": "rule"}
        rows.append(row)
    return rows


def pipeline(
    tmp_path: Path, model: str, data: Path, reward: str = "mypkg.reward:compute_score"
) -> dict:
    """The user's GRPO pipeline: their data, model and reward; runs stored under tmp_path."""
    nodes = grpo_nodes("${model.path}", data, reward, generate={"n": 2, "max_new_tokens": 4})
    nodes["prompts"]["params"]["batch_size"] = 4
    return {
        "name": "byo",
        "iterations": 1,
        "model": {"path": model},
        "storage": {"uri": f"file://{tmp_path}/runs"},
        "nodes": nodes,
    }


def write_pipeline(tmp_path: Path, doc: dict) -> Path:
    """pipeline.yaml in tmp_path."""
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def rldag(
    *args: str, cwd: Path, user_root: Path | None = None, env: dict | None = None, timeout=300
) -> subprocess.CompletedProcess:
    """The real `rldag` command in a process of its own, the user's package importable."""
    import os

    paths = [str(p) for p in (user_root, ROOT) if p is not None]
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), **(env or {})}
    command = [sys.executable, "-m", "flows.cli", *args]
    return subprocess.run(
        command, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def assert_refused(code: int, err: str, runs: Path, *fragments: str) -> None:
    """Bad input: exit 2, one error naming each fragment, no traceback, no run directory."""
    flat = " ".join(err.split())  # rich wraps long lines
    assert code == 2, err
    assert "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in flat, f"{fragment!r} not in: {flat}"
    assert not runs.exists(), f"{runs} was written"
