"""Algorithms by name: estimators, policy losses, KL estimators and loss aggregations are
registries; a typo is refused at `rldag validate` (exit 2) naming the key path and listing
the registered names; `module:function` names user code; choices are enums."""

from __future__ import annotations

import pytest

from flows.cli import main
from operators.algorithms.advantages import ADVANTAGE_ESTIMATORS
from operators.algorithms.aggregation import LOSS_AGGREGATIONS, Unit
from operators.algorithms.kl import KL_ESTIMATORS
from operators.algorithms.policy_losses import POLICY_LOSSES
from operators.train.policy_gradient_params import PolicyGradientParams
from operators.transform.advantage import EstimatorParams
from operators.transform.kl_reward import KLRewardParams
from rldag.config.errors import SpecError
from tests.support import algorithm_user_code
from tests.support.paths import ROOT

ESTIMATORS = ["grpo", "dr_grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"]


def test_the_registries_hold_the_built_in_names():
    assert set(ESTIMATORS + ["remax"]) <= set(ADVANTAGE_ESTIMATORS.names())
    assert {"ppo", "gspo", "cispo"} <= set(POLICY_LOSSES.names())
    assert {"k1", "k2", "k3", "abs", "mse", "low_var_kl"} <= set(KL_ESTIMATORS.names())
    assert LOSS_AGGREGATIONS.get("token-mean").unit == Unit.token
    assert LOSS_AGGREGATIONS.get("seq-mean-token-sum").unit == Unit.sequence


@pytest.mark.parametrize(
    ("override", "key", "known"),
    [
        ("nodes.train.params.policy_loss=gspoo", "nodes.train.params.policy_loss", "cispo, gspo"),
        ("nodes.train.params.loss_agg_mode=token-sum", "nodes.train.params.loss_agg_mode", "seq-"),
        ("nodes.train.params.kl_estimator=k4", "nodes.train.params.kl_estimator", "k1, k2, k3"),
        ("nodes.advantage.params.estimator=rlo", "nodes.advantage.params.estimator", "rloo"),
        ("nodes.train.params.tis=tokn", "nodes.train.params.tis", "sequence"),
        ("nodes.train.params.off_policy=decoupld", "nodes.train.params.off_policy", "decoupled"),
    ],
)
def test_a_typo_is_refused_at_validate_naming_the_key_and_the_known_names(
    override, key, known, capsys
):
    args = ["validate", str(ROOT / "pipeline.yaml"), override]
    if "advantage" in override:
        args.append("nodes.advantage.op=advantage")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{key}:" in err and known in err
    assert "Traceback" not in err


def test_every_built_in_name_validates(capsys):
    for estimator in ESTIMATORS:
        args = ["nodes.advantage.op=advantage", f"nodes.advantage.params.estimator={estimator}"]
        assert main(["validate", str(ROOT / "pipeline.yaml"), *args]) == 0
    for loss in ("ppo", "gspo", "cispo"):
        override = f"nodes.train.params.policy_loss={loss}"
        assert main(["validate", str(ROOT / "pipeline.yaml"), override]) == 0
    assert "5 nodes" in capsys.readouterr().out


def test_module_function_names_user_code():
    name = "tests.support.algorithm_user_code:reward_as_advantage"
    assert ADVANTAGE_ESTIMATORS.get(name) is algorithm_user_code.reward_as_advantage
    assert EstimatorParams(estimator=name).estimator == name
    with pytest.raises(SpecError, match="has no attribute 'nope'") as err:
        EstimatorParams(estimator="tests.support.algorithm_user_code:nope")
    assert err.value.path == "estimator"
    with pytest.raises(SpecError, match="is not a function"):
        PolicyGradientParams(
            model_path="m", policy_loss="tests.support.algorithm_user_code:NOT_A_FUNCTION"
        )
    with pytest.raises(SpecError, match="cannot import module"):
        KLRewardParams(kl_estimator="no_such_module:k9")


def test_a_user_aggregation_must_declare_its_unit():
    # Aggregations carry the unit the trainer weighs micro-batches by: a bare function is refused.
    with pytest.raises(SpecError, match="is not LossAggregation") as err:
        PolicyGradientParams(
            model_path="m", loss_agg_mode="tests.support.algorithm_user_code:reward_as_advantage"
        )
    assert err.value.path == "loss_agg_mode"


def test_tis_and_decoupled_are_one_correction():
    with pytest.raises(SpecError, match="use one of tis and off_policy") as err:
        PolicyGradientParams(model_path="m", tis="token", off_policy="decoupled")
    assert err.value.path == "tis"
