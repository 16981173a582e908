"""Where an agent's environments live: `env_hosting: local` keeps them in the rollout worker's
process even when the run lends the node an environment pool; a bad value names the key; the
actors' typed handle matches the host."""

from __future__ import annotations

from typing import get_type_hints

import pytest

from operators.generate.agent.environment import AssistantTurn
from operators.generate.agent.hosting import (
    EnvironmentHandle,
    EnvironmentHost,
    LocalHosts,
    start_hosts,
)
from operators.generate.agent.params import AgentParams, EnvHosting
from rldag.config.errors import SpecError
from rldag.graph.operator import PoolReservation
from tests.support.handles import mismatches, public_methods

GAME = {
    "model_path": "unused",
    "environment": "operators.generate.agent.guessing_game:GuessingGame",
    "env_params": {"low": 0, "high": 9, "strict": True},
    "tool_parser": "none",
}
# A reservation as Ray lends it; local hosting never touches its placement group.
RESERVATION = PoolReservation("environment", None, bundles=1, cpus=1.0, max_concurrency=0)


def test_local_hosting_plays_in_process_even_with_a_pool_reserved():
    params = AgentParams(**GAME, env_hosting="local")
    assert params.env_hosting is EnvHosting.local
    hosts = start_hosts(params, RESERVATION)
    assert isinstance(hosts, LocalHosts)
    try:
        assert hosts.open("e", {"ground_truth": "3"}, 5.0) == ([], [])
        reply = hosts.step("e", AssistantTurn("7"), 5.0)
        assert reply.observation == [{"role": "user", "content": "lower"}] and not reply.done
        won = hosts.step("e", AssistantTurn("3"), 5.0)
        assert won.done and won.reward == 1.0 - 0.25  # default penalty 1/4 for the 2nd guess
    finally:
        hosts.shutdown()


def test_without_a_pool_the_environments_are_in_process_whatever_the_choice():
    assert isinstance(start_hosts(AgentParams(**GAME), None), LocalHosts)


def test_an_unknown_hosting_names_the_key_and_the_choices():
    with pytest.raises(SpecError) as err:
        AgentParams(**GAME, env_hosting="remote")
    assert err.value.path == "env_hosting" and "pool, local" in str(err.value)


def test_the_actor_handle_matches_the_host_without_ray():
    assert public_methods(EnvironmentHost) == set(get_type_hints(EnvironmentHandle))
    assert mismatches(EnvironmentHandle, EnvironmentHost) == []
