"""The reward service's shipped pipelines: its docs guide includes examples/reward_model.yaml
(a snippet, so it shows the file as it is), and `rldag validate` accepts both examples."""

from __future__ import annotations

from flows.cli import main
from tests.support.paths import ROOT


def test_the_guide_shows_the_reward_model_example_as_it_is():
    guide = (ROOT / "docs" / "guides" / "reward-service.md").read_text()
    assert '```yaml\n--8<-- "examples/reward_model.yaml"\n```' in guide


def test_the_reward_service_examples_validate(tiny_task, tiny_rm, capsys):
    for name in ("reward_model.yaml", "composed_reward.yaml"):
        path = ROOT / "examples" / name
        overrides = [
            f"model.path={tiny_task / 'model'}",
            f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        ]
        assert main(["validate", str(path), *overrides]) == 0, capsys.readouterr().err


def test_plan_shows_the_reward_pool_and_the_streamed_score(capsys):
    assert main(["plan", str(ROOT / "examples" / "reward_model.yaml")]) == 0
    out = capsys.readouterr().out
    assert "pool reward  split  placement group 1 x {CPU: 1}" in out and "runs score" in out
    assert "score <- generate" in out.split("streamed")[1].splitlines()[0]


def test_a_pool_bounds_a_remote_verifiers_concurrency(write_yaml, dataset, capsys):
    from tests.support.pipelines import scoring_pipeline

    doc = scoring_pipeline(dataset, pools={"verifier": {"workers": 2, "max_concurrency": 6}})
    doc["nodes"]["verify"] = {
        "kind": "score",
        "op": "remote",
        "pool": "verifier",
        "inputs": {"rollouts": "answer"},
        "params": {"url": "http://127.0.0.1:9/verify", "concurrency": 4, "columns": ["response"]},
    }
    assert main(["plan", str(write_yaml(doc))]) == 2
    err = capsys.readouterr().err
    assert "2 worker(s) x concurrency 4 = 8 exceeds pools.verifier.max_concurrency=6" in err
    doc["nodes"]["verify"]["params"]["columns"] = ["respons"]
    doc["pools"]["verifier"]["max_concurrency"] = 8
    assert main(["validate", str(write_yaml(doc))]) == 2
    assert (
        "nodes.verify.params.columns: column 'respons' is not in the input"
        in capsys.readouterr().err
    )
