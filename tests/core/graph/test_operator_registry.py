"""The operator registry imports an operator's module only when a node uses it: a process
that runs a score node never imports torch; a registered path that does not hold the named
operator is a clear error."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rldag.config.errors import GraphError
from rldag.config.spec import NodeKind
from rldag.graph import registry
from rldag.graph.registry import operator_names, register_path, resolve

PROBE = """
import sys
from rldag.graph.registry import operator_names, resolve
from rldag.config.spec import NodeKind
names = operator_names()
resolve("dataset", NodeKind.source)
resolve("arithmetic", NodeKind.score)
before = "torch" in sys.modules
resolve("policy_gradient", NodeKind.train)
print(len(names), before, "torch" in sys.modules)
"""


def test_operators_are_imported_when_a_node_uses_them():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    count, before, after = out.stdout.split()
    assert int(count) >= 20 and (before, after) == ("False", "True")


def test_the_unknown_operator_error_lists_the_known_ones_of_its_kind():
    with pytest.raises(GraphError, match=r"unknown operator 'nope' for kind train") as err:
        resolve("nope", NodeKind.train)
    assert "(known: critic, policy_gradient)" in str(err.value)
    assert "torch_engine" in operator_names()


def test_a_path_that_is_not_the_named_operator_is_refused(monkeypatch):
    # no name left behind
    monkeypatch.setattr(registry.OPERATORS, "_paths", dict(registry.OPERATORS._paths))
    monkeypatch.setattr(registry, "_KINDS", dict(registry._KINDS))
    register_path(
        "test_misnamed", NodeKind.transform, "operators.transform.advantage:GRPO_ADVANTAGE"
    )
    with pytest.raises(GraphError, match="is not the transform operator 'test_misnamed'"):
        resolve("test_misnamed", NodeKind.transform)
    with pytest.raises(ValueError, match="already registered"):
        register_path(
            "test_misnamed", NodeKind.score, "operators.transform.advantage:GRPO_ADVANTAGE"
        )
