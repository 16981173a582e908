"""The reward service's shipped pipelines: the README shows examples/reward_model.yaml as it
is, and `rldag validate` accepts both examples."""

from __future__ import annotations

from pathlib import Path

from flows.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_shows_the_reward_model_example_as_it_is():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Reward service") :]
    shown = section[section.index("```yaml\n") + len("```yaml\n") :]
    shown = shown[: shown.index("```")]
    assert shown == (ROOT / "examples" / "reward_model.yaml").read_text()


def test_the_reward_service_examples_validate(tiny_task, tiny_rm, capsys):
    for name in ("reward_model.yaml", "composed_reward.yaml"):
        path = ROOT / "examples" / name
        overrides = [
            f"model.path={tiny_task / 'model'}",
            f"nodes.prompts.params.path={tiny_task / 'train.parquet'}",
        ]
        assert main(["validate", str(path), *overrides]) == 0, capsys.readouterr().err
