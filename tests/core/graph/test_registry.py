"""The one generic Registry: names and aliases, lazy paths, user code through the accept hook,
and errors that name the key path and list the known names."""

from __future__ import annotations

import pytest

from rldag.config.errors import SpecError, UnknownNameError
from rldag.graph.registry import Registry, instance_of
from tests.support import algorithm_user_code


def test_a_value_is_registered_under_its_names_and_a_name_holds_one_value():
    things: Registry[object] = Registry("thing")

    @things.register("double", "twice")
    def double(x):
        return 2 * x

    assert things.get("double") is double and things.get("twice") is double
    things.add("double", double)  # the same value again is no change
    with pytest.raises(ValueError, match="thing 'double' is already registered"):
        things.add("double", abs)
    assert things.names() == ["double", "twice"] and "twice" in things


def test_an_unknown_name_names_the_key_and_the_known_names():
    things: Registry[object] = Registry("thing")
    things.add("a", abs)
    with pytest.raises(UnknownNameError) as err:
        things.get("b", "nodes.x.params.thing")
    assert err.value.path == "nodes.x.params.thing"
    assert "unknown thing 'b' (known: a; or module:function)" in str(err.value)
    assert isinstance(err.value, SpecError) and isinstance(err.value, ValueError)


def test_a_path_is_imported_on_first_use_and_checked():
    things: Registry[object] = Registry("thing")
    things.add_path(
        "three", "tests.support.algorithm_user_code:NOT_A_FUNCTION", accept=lambda p, f: f
    )
    things.add_path(
        "three", "tests.support.algorithm_user_code:NOT_A_FUNCTION"
    )  # same path: no change
    with pytest.raises(ValueError, match="already registered"):
        things.add_path("three", "tests.support.algorithm_user_code:reward_as_advantage")
    assert dict(things.entries()) == {"three": "tests.support.algorithm_user_code:NOT_A_FUNCTION"}
    assert things.get("three") == 3
    assert dict(things.entries()) == {"three": 3}


def test_user_code_goes_through_the_accept_hook():
    functions: Registry[object] = Registry("function")
    name = "tests.support.algorithm_user_code:reward_as_advantage"
    assert functions.get(name) is algorithm_user_code.reward_as_advantage
    with pytest.raises(
        SpecError, match="'tests.support.algorithm_user_code:NOT_A_FUNCTION' is not a fun"
    ):
        functions.get("tests.support.algorithm_user_code:NOT_A_FUNCTION", "key")
    with pytest.raises(UnknownNameError, match="has no attribute 'nope'") as err:
        functions.check("key", "tests.support.algorithm_user_code:nope")
    assert err.value.path == "key"
    numbers: Registry[int] = Registry("number", accept=instance_of(int))
    assert numbers.get("tests.support.algorithm_user_code:NOT_A_FUNCTION") == 3
    with pytest.raises(SpecError, match="is not int"):
        numbers.get(name)


def test_modules_register_their_names_on_the_first_lookup():
    from operators.algorithms.advantages import ADVANTAGE_ESTIMATORS

    assert {"gae", "reinforce_plus_plus"} <= set(ADVANTAGE_ESTIMATORS.names())
