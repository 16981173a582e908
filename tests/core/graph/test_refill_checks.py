"""Refill rounds in the graph: the checks `rldag validate` makes (exit 2, the key path, the
node and what was expected) and the filter's shortfall on its table (rldag/graph/refill.py)."""

from __future__ import annotations

import pyarrow as pa
import yaml

from flows.cli import main
from rldag.graph.refill import shortfall, with_shortfall
from tests.support.paths import ROOT

EXAMPLE = str(ROOT / "examples" / "dapo.yaml")


def test_a_source_that_cannot_draw_fresh_prompts_is_refused_naming_the_bound(capsys):
    code = main(["validate", EXAMPLE, "nodes.prompts.op=tests.support.user_code:ONE_BATCH_SOURCE"])
    err = capsys.readouterr().err
    assert code == 2
    assert "examples/dapo.yaml: nodes.filter.params.max_rounds: node 'filter' runs up to 10" in err
    assert "source 'prompts' (op one_batch_source) serves one batch per iteration" in err
    assert "set max_rounds: 1" in err


def test_the_same_source_is_fine_without_refill():
    one_batch = "nodes.prompts.op=tests.support.user_code:ONE_BATCH_SOURCE"
    assert main(["validate", EXAMPLE, one_batch, "nodes.filter.params.max_rounds=1"]) == 0


def test_two_refilling_nodes_are_refused_naming_the_second(capsys, tmp_path):
    pipeline = yaml.safe_load((ROOT / "examples" / "dapo.yaml").read_text())
    nodes = pipeline["nodes"]
    nodes["again"] = {"kind": "transform", "op": "dynamic_sampling", "inputs": {"scored": "filter"}}
    nodes["overlong"]["inputs"] = {"scored": "again"}
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(pipeline, sort_keys=False))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "nodes.again.params.max_rounds: nodes 'filter', 'again' all run refill rounds" in err


def test_a_filter_says_how_many_groups_it_lacks_on_its_table():
    table = pa.table({"prompt_id": [1, 1]})
    assert shortfall(table, "filter") == 0
    assert shortfall(with_shortfall(table, "filter", 3), "filter") == 3
    assert shortfall(with_shortfall(table, "filter", 3), "other") == 0
