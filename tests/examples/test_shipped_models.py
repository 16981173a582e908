"""The tiny models ship with the project: `make model` installs them byte for byte (checked by
their SHA-256 sums), a damaged file is refused by name, and every CPU kernel path starts RL
from the same policy and reward model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from examples.tiny_task import build_tiny_task, is_built
from examples.tiny_task.build import cache_key
from examples.tiny_task.params import TinyTaskParams
from examples.tiny_task.shipped import (
    SHIPPED_ROOT,
    ShippedBuildError,
    install,
    is_installed,
    read_checksums,
    shipped_build,
)
from tests.support.paths import ROOT

# Kernel paths another processor would pick, forced on this one: ATen's vectorised kernels,
# MKL's BLAS code path and oneDNN's (bench/learning_spread.py uses the same).
KERNELS = {
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    },
    "scalar": {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_CBWR": "COMPATIBLE",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
    },
}
START = """
import json
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
from examples.tiny_task import all_problems
from examples.tiny_task.evaluate import evaluate_policy
from examples.tiny_task.reward_model import right_sum_ranked_first
policy, rm = {policy!r}, {rm!r}
tok = AutoTokenizer.from_pretrained(policy)
accuracy = evaluate_policy(AutoModelForCausalLM.from_pretrained(policy), tok, all_problems())
model = AutoModelForSequenceClassification.from_pretrained(rm).eval()
first = right_sum_ranked_first(model, AutoTokenizer.from_pretrained(rm))
print(json.dumps({{"accuracy": accuracy["accuracy"], "ranked_first": first}}))
"""


@pytest.mark.parametrize(
    "name", ["addition", "lookup", "guess", "code", "long_cot", "reward_model"]
)
def test_every_shipped_build_matches_its_checksums(name: str) -> None:
    shipped = SHIPPED_ROOT / name
    sums = read_checksums(shipped)
    assert sums and any(n.endswith("model.safetensors") for n in sums)
    assert is_installed(shipped, shipped)


def test_make_model_installed_the_shipped_addition_build(tiny_task: Path) -> None:
    shipped = shipped_build(cache_key(TinyTaskParams()))
    assert shipped == SHIPPED_ROOT / "addition"
    assert is_installed(tiny_task, shipped) and is_built(tiny_task)


def test_a_damaged_shipped_file_is_refused_by_name(tmp_path: Path) -> None:
    damaged = tmp_path / "addition"
    shutil.copytree(SHIPPED_ROOT / "addition", damaged)
    weights = damaged / "model" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(ShippedBuildError, match=r"model/model\.safetensors do not match"):
        install(damaged, tmp_path / "into")
    assert not (tmp_path / "into").exists()


def test_a_changed_install_is_replaced_by_the_shipped_files(tmp_path: Path) -> None:
    out = build_tiny_task(tmp_path / "tiny")
    assert is_installed(out, SHIPPED_ROOT / "addition")
    (out / "model" / "config.json").write_text("{}")  # an edit, or a local rebuild
    assert not is_built(out)
    build_tiny_task(out)
    assert is_installed(out, SHIPPED_ROOT / "addition")


@pytest.mark.slow
def test_every_kernel_path_starts_from_the_same_policy_and_reward_model(tiny_task, tiny_rm):
    """The shipped policy's sampled accuracy (1,600 seeded samples) and the reward model's
    ranking are what build.json recorded under each kernel path. Kernels change logits by
    float rounding (~1e-6); a sample changes only when its seeded uniform falls that close
    to a boundary of the sampling distribution: expected far below one of the 1,600 (measured:
    none, 0.171875 under AVX-512, AVX2 and scalar kernels). 3 samples of slack, and 1 of the
    100 problems' rankings."""
    recorded = json.loads((tiny_task / "build.json").read_text())["warmup"]["accuracy"]
    ranked = json.loads((tiny_rm / "build.json").read_text())["right_sum_ranked_first"]
    code = START.format(policy=str(tiny_task / "model"), rm=str(tiny_rm))
    for kernel, env in KERNELS.items():
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, **env},
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert abs(got["accuracy"] - recorded) <= 3 / 1600, (kernel, got)
        assert abs(got["ranked_first"] - ranked) <= 1 / 100, (kernel, got)
