"""The docs' "Coming from veRL / TRL" guide: the documented pipeline is examples/from_verl.yaml
(included, not copied), it validates, and the keys the mapping table names exist on the
operators it names."""

from __future__ import annotations

import dataclasses
import re

from flows.cli import main
from rldag.config.spec import NodeKind
from rldag.graph.registry import resolve
from tests.support.paths import ROOT

EXAMPLE = ROOT / "examples" / "from_verl.yaml"


def _section() -> str:
    return (ROOT / "docs" / "guides" / "from-verl-trl.md").read_text()


def test_the_documented_pipeline_is_the_example_file():
    blocks = re.findall(r"```yaml\n(.*?)```", _section(), flags=re.S)
    assert blocks == ['--8<-- "examples/from_verl.yaml"\n']


def test_the_example_validates(tiny_task, capsys):
    overrides = [
        f"model.path={tiny_task / 'model'}",
        f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
    ]
    assert main(["validate", str(EXAMPLE), *overrides]) == 0
    assert "5 nodes" in capsys.readouterr().out


def test_the_table_names_real_params():
    section = _section()
    ops = {
        "train": ("policy_gradient", NodeKind.train),
        "generate": ("torch_engine", NodeKind.generate),
    }
    for prefix, (op, kind) in ops.items():
        fields = {f.name for f in dataclasses.fields(resolve(op, kind).params)}
        named = set(re.findall(rf"{prefix}'s ((?:`\w+`(?:, | and |; )?)+)", section))
        keys = {k for group in named for k in re.findall(r"`(\w+)`", group)}
        assert keys, prefix
        assert keys <= fields, (prefix, keys - fields)
