"""pipeline.yaml errors name the file and the key path; overrides are OmegaConf dotlists."""

from __future__ import annotations

import pytest

from rldag.config.errors import SpecError
from rldag.config.spec import NodeKind, PoolName, load_pipeline
from tests.support.pipelines import scoring_pipeline


def _error(path, overrides=()) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_pipeline(path, list(overrides))
    return info.value


def test_valid_pipeline_loads_with_defaults(write_yaml, dataset):
    loaded = load_pipeline(write_yaml(scoring_pipeline(dataset)))
    spec = loaded.spec
    assert spec.iterations == 2
    assert spec.storage.uri == "file://./runs" and spec.storage.persist is True
    assert list(spec.nodes) == ["prompts", "answer", "score", "advantage"]
    assert spec.nodes["score"].kind is NodeKind.score
    assert spec.nodes["prompts"].resolved_pool is PoolName.driver


def test_pool_defaults_by_kind(write_yaml, dataset):
    doc = scoring_pipeline(dataset)
    doc["nodes"]["gen"] = {"kind": "generate", "op": "x"}
    doc["nodes"]["fit"] = {"kind": "train", "op": "x"}
    doc["nodes"]["box"] = {"kind": "sandbox", "op": "x", "pool": "driver"}
    nodes = load_pipeline(write_yaml(doc)).spec.nodes
    assert nodes["gen"].resolved_pool is PoolName.rollout
    assert nodes["fit"].resolved_pool is PoolName.training
    assert nodes["box"].resolved_pool == PoolName.driver


def test_unknown_key_names_its_path(write_yaml, dataset):
    doc = scoring_pipeline(dataset)
    doc["nodes"]["score"]["retry"] = 3
    err = _error(write_yaml(doc))
    assert err.path == "nodes.score.retry"
    assert "retry" in str(err) and "pipeline.yaml" in str(err)


def test_wrong_type_names_its_path(write_yaml, dataset):
    err = _error(write_yaml(scoring_pipeline(dataset, iterations="many")))
    assert err.path == "iterations"
    assert "many" in err.message


def test_bad_enum_value_lists_the_choices(write_yaml, dataset):
    doc = scoring_pipeline(dataset)
    doc["nodes"]["score"]["kind"] = "scorer"
    err = _error(write_yaml(doc))
    assert err.path == "nodes.score.kind"
    assert "transform" in err.message and "scorer" in err.message


def test_missing_mandatory_field_names_its_path(write_yaml, dataset):
    doc = scoring_pipeline(dataset)
    del doc["nodes"]["score"]["op"]
    assert _error(write_yaml(doc)).path == "nodes.score.op"
    doc = scoring_pipeline(dataset)
    del doc["model"]
    assert _error(write_yaml(doc)).path == "model.path"


def test_overrides_are_applied_and_typed(write_yaml, dataset):
    path = write_yaml(scoring_pipeline(dataset))
    loaded = load_pipeline(path, ["iterations=5", "storage.uri=file:///tmp/r", "seed=3"])
    assert (loaded.spec.iterations, loaded.spec.seed) == (5, 3)
    assert loaded.spec.storage.uri == "file:///tmp/r"
    assert _error(path, ["iterations=five"]).path == "iterations"
    assert _error(path, ["storage.bucket=b"]).path == "storage.bucket"
    assert "not key=value" in _error(path, ["iterations"]).message


def test_interpolation_is_resolved_into_the_stored_yaml(write_yaml, dataset):
    doc = scoring_pipeline(dataset, name="n1")
    doc["nodes"]["prompts"]["params"]["batch_size"] = "${iterations}"
    loaded = load_pipeline(write_yaml(doc), ["iterations=3"])
    assert loaded.spec.nodes["prompts"].params["batch_size"] == 3
    assert "batch_size: 3" in loaded.resolved_yaml and "${" not in loaded.resolved_yaml


def test_broken_interpolation_names_its_path(write_yaml, dataset):
    doc = scoring_pipeline(dataset)
    doc["nodes"]["prompts"]["params"]["batch_size"] = "${nope.size}"
    err = _error(write_yaml(doc))
    assert err.path == "nodes.prompts.params.batch_size"


def test_duplicate_node_names_are_rejected(write_yaml):
    text = "model: {path: m}\nnodes:\n  a: {kind: source, op: dataset}\n  a: {kind: score, op: x}\n"
    err = _error(write_yaml(text))
    assert "duplicate key" in err.message and "line 4" in err.message


def test_invalid_yaml_and_missing_file(write_yaml, tmp_path):
    assert "not valid YAML" in _error(write_yaml("nodes: [\n")).message
    assert "not found" in _error(tmp_path / "nope.yaml").message
    assert "mapping" in _error(write_yaml("- a\n- b\n")).message


def test_value_checks(write_yaml, dataset):
    assert _error(write_yaml(scoring_pipeline(dataset, iterations=0))).path == "iterations"
    assert _error(write_yaml(scoring_pipeline(dataset, nodes={}))).path == "nodes"
