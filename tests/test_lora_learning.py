"""The default task learns with LoRA (examples/lora.yaml, the README's bar: mean reward of the
last 3 iterations >= 0.5 and >= 2x the first 3), with only adapters on the weights edge and
the exported adapter and merged model serving the same trained policy."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from rldag.graph import build_graph
from rldag.run import Run
from rldag.spec import load_pipeline

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def test_the_default_task_learns_with_lora(ray_local, tiny_task, tmp_path):
    from peft import PeftModel

    loaded = load_pipeline(
        ROOT / "examples" / "lora.yaml",
        [
            f"storage.uri={tmp_path}",
            f"model.path={tiny_task / 'model'}",
            f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        ],
    )
    run = Run.start(loaded, build_graph(loaded))
    run.run_inline()
    metrics = pq.read_table(Path(run.uri) / "metrics.parquet").to_pylist()
    rewards = [row["reward/mean"] for row in metrics]
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert first <= 0.3, rewards
    assert last >= 0.5 and last >= 2 * first, rewards

    hf = Path(run.uri) / "hf" / "train"
    adapter = load_file(hf / "adapter_model.safetensors")
    base = AutoModelForCausalLM.from_pretrained(tiny_task / "model")
    full = sum(t.nbytes for t in base.state_dict().values())
    for row in metrics[1:]:  # iteration 0 runs on the initial policy
        assert row["weights/lora"] == 1
        assert row["weights/bytes"] == sum(t.nbytes for t in adapter.values()) < full / 4
    ids = torch.arange(3, 9)[None]
    with torch.no_grad():
        want = PeftModel.from_pretrained(base, hf).eval()(input_ids=ids).logits
        merged = AutoModelForCausalLM.from_pretrained(hf / "merged").eval()
        torch.testing.assert_close(merged(input_ids=ids).logits, want, atol=1e-5, rtol=0)
