"""Graph validation: operators, ports, dangling inputs, cycles and edge schemas are checked
before any compute, and every error names the node, port and column."""

from __future__ import annotations

import pyarrow as pa
import pytest

from rldag.config.errors import GraphError, InputError, SchemaError, SpecError
from rldag.config.spec import load_pipeline
from rldag.graph.dag import build_graph
from tests.support.pipelines import scoring_pipeline


def _graph(write_yaml, doc):
    return build_graph(load_pipeline(write_yaml(doc)))


def _error(write_yaml, doc, kind=InputError):
    with pytest.raises(kind) as info:
        _graph(write_yaml, doc)
    return info.value


def test_valid_graph_orders_nodes_and_propagates_schemas(write_yaml, dataset):
    doc = scoring_pipeline(dataset)
    # Declare nodes out of order: the topological order must still be correct.
    doc["nodes"] = {k: doc["nodes"][k] for k in ("advantage", "score", "answer", "prompts")}
    graph = _graph(write_yaml, doc)
    assert graph.order == ["prompts", "answer", "score", "advantage"]
    out = graph.nodes["advantage"].output
    for name, typ in [("prompt_id", pa.int64()), ("reward", pa.float32())]:
        assert out.field(name).type == typ
    assert out.field("advantage").type == pa.float32()
    # veRL parquet: reward_model.ground_truth -> ground_truth, struct extra_info -> JSON string.
    src = graph.nodes["prompts"].output
    assert src.field("ground_truth").type == pa.string()
    assert src.field("extra_info").type == pa.string()
    assert "reward_model" not in src.names
    assert graph.consumers("score") == ["advantage"]


def test_unknown_operator_lists_known_ones(write_yaml, dataset):
    doc = scoring_pipeline(dataset)
    doc["nodes"]["advantage"]["op"] = "grpo_advantages"
    err = _error(write_yaml, doc, GraphError)
    assert err.path == "nodes.advantage.op"
    assert "grpo_advantage" in err.message


def test_operator_of_the_wrong_kind(write_yaml, dataset):
    doc = scoring_pipeline(dataset)
    doc["nodes"]["advantage"]["kind"] = "score"
    err = _error(write_yaml, doc, GraphError)
    assert err.path == "nodes.advantage.op" and "transform" in err.message


def test_user_code_paths_are_checked(write_yaml, dataset):
    doc = scoring_pipeline(dataset)
    doc["nodes"]["score"]["op"] = "tests.no_such_module:f"
    assert "cannot import" in _error(write_yaml, doc, GraphError).message
    doc["nodes"]["score"]["op"] = "tests.support.user_code:missing"
    assert "no attribute" in _error(write_yaml, doc, GraphError).message
    doc["nodes"]["score"]["op"] = "tests.support.user_code:NOT_AN_OPERATOR"
    assert "neither" in _error(write_yaml, doc, GraphError).message


def test_dangling_input_names_the_port(write_yaml, dataset):
    doc = scoring_pipeline(dataset)
    doc["nodes"]["score"]["inputs"] = {"rollouts": "answr"}
    err = _error(write_yaml, doc, GraphError)
    assert err.path == "nodes.score.inputs.rollouts"
    assert "'answr' does not exist" in err.message


def test_unknown_and_unconnected_ports(write_yaml, dataset):
    doc = scoring_pipeline(dataset)
    doc["nodes"]["score"]["inputs"] = {"batch": "answer"}
    err = _error(write_yaml, doc, GraphError)
    assert err.path == "nodes.score.inputs.batch" and "rollouts" in err.message
    doc["nodes"]["score"]["inputs"] = {}
    err = _error(write_yaml, doc, GraphError)
    assert err.path == "nodes.score.inputs" and "'rollouts'" in err.message


def test_cycle_is_rejected_naming_its_nodes(write_yaml, dataset):
    doc = scoring_pipeline(dataset)
    doc["nodes"]["answer"]["inputs"] = {"prompts": "advantage"}
    err = _error(write_yaml, doc, GraphError)
    assert "cycle" in err.message
    assert all(n in err.message for n in ("advantage", "answer", "score"))
    doc["nodes"]["answer"]["inputs"] = {"prompts": "answer"}
    assert "its own output" in _error(write_yaml, doc, GraphError).message


def test_missing_column_names_node_port_column(write_yaml, dataset):
    doc = scoring_pipeline(dataset)
    doc["nodes"]["score"]["inputs"] = {"rollouts": "prompts"}  # no `response` upstream
    err = _error(write_yaml, doc, SchemaError)
    assert err.path == "nodes.score.inputs.rollouts"
    assert "'response'" in err.message and "missing" in err.message
    assert "node 'score'" in err.message and "node 'prompts'" in err.message


def test_type_mismatch_names_both_types(write_yaml, dataset):
    doc = scoring_pipeline(dataset)
    doc["nodes"]["score"] = {
        "kind": "transform",
        "op": "tests.support.user_code:DOUBLE_REWARD",
        "inputs": {"rows": "answer"},
    }
    err = _error(write_yaml, doc, SchemaError)
    assert err.path == "nodes.advantage.inputs.scored"
    assert "column 'reward' is double, expected float" in err.message


def test_params_are_validated_against_the_operator(write_yaml, dataset):
    doc = scoring_pipeline(dataset)
    doc["nodes"]["advantage"]["params"] = {"norm_by_stdev": True}
    assert _error(write_yaml, doc, SpecError).path == "nodes.advantage.params.norm_by_stdev"
    doc["nodes"]["advantage"]["params"] = {"eps": "tiny"}
    assert _error(write_yaml, doc, SpecError).path == "nodes.advantage.params.eps"
    doc = scoring_pipeline(dataset)
    doc["nodes"]["score"]["params"] = {"scale": 2}
    assert _error(write_yaml, doc, SpecError).path == "nodes.score.params.scale"
    doc["nodes"]["score"]["params"] = {"on_error": "ignore"}
    assert _error(write_yaml, doc, SpecError).path == "nodes.score.params.on_error"
    doc["nodes"]["score"]["params"] = {"timeout_s": -1}
    assert _error(write_yaml, doc, SpecError).path == "nodes.score.params.timeout_s"
    doc["nodes"]["score"] = {"kind": "score", "op": "pass_rate", "params": {"scale": 2}}
    assert _error(write_yaml, doc, GraphError).path == "nodes.score.params.scale"


def test_source_data_is_checked_before_anything_runs(write_yaml, dataset, tmp_path):
    doc = scoring_pipeline(dataset)
    doc["nodes"]["prompts"]["params"]["path"] = str(tmp_path / "missing.parquet")
    err = _error(write_yaml, doc)
    assert err.path == "nodes.prompts.params.path" and "not found" in err.message
    doc["nodes"]["prompts"]["params"] = {"path": str(dataset), "prompt_key": "question"}
    err = _error(write_yaml, doc)
    assert err.path == "nodes.prompts.params.prompt_key" and "question" in err.message
