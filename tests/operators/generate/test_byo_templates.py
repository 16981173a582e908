"""A new user's tokenizer and chat template (issue 28, items 5 and 8): chat-message prompts
with a tokenizer that has no chat template are refused for `torch_engine` as for the agent;
a chat template that ignores the tools an agent node passes is refused (the model would never
see their schemas), unless the node says its model learned them without."""

from __future__ import annotations

import pytest

from flows.cli import main
from tests.support.byo import (
    NO_TOOLS_TEMPLATE,
    VERL_REWARD,
    assert_refused,
    build_model,
    chat_rows,
    pipeline,
    user_package,
    verl_parquet,
)
from tests.support.byo import write_pipeline as write

TOOL = '''
def lookup(key: int) -> str:
    """The fact stored under key.

    Args:
        key: which fact
    """
    return str(key)
'''


@pytest.mark.parametrize("command", ["validate", "run"])
def test_chat_prompts_need_a_chat_template(command, tmp_path, user_root, capsys):
    model = build_model(tmp_path / "my-llama", chat_template=None)
    user_package(user_root, {"reward.py": VERL_REWARD})
    data = verl_parquet(tmp_path / "train.parquet", chat_rows())
    code = main([command, str(write(tmp_path, pipeline(tmp_path, str(model), data)))])
    assert_refused(
        code,
        capsys.readouterr().err,
        tmp_path / "runs",
        "nodes.generate.params.model_path: the tokenizer has no chat template (the prompts "
        "are chat messages, rendered by it)",
        "chat_template.jinja",
    )


def _agent_pipeline(tmp_path, user_root, model, **params) -> str:
    user_package(user_root, {"reward.py": VERL_REWARD, "tools.py": TOOL})
    data = verl_parquet(tmp_path / "train.parquet", chat_rows())
    doc = pipeline(tmp_path, str(model), data)
    doc["nodes"]["generate"]["op"] = "agent_loop"
    doc["nodes"]["generate"]["params"]["tools"] = ["mypkg.tools:lookup"]
    doc["nodes"]["generate"]["params"].pop("max_new_tokens")
    doc["nodes"]["generate"]["params"].update(params)
    return str(write(tmp_path, doc))


def test_a_template_that_ignores_tools_is_refused(tmp_path, user_root, capsys):
    model = build_model(tmp_path / "my-llama", chat_template=NO_TOOLS_TEMPLATE)
    code = main(["validate", _agent_pipeline(tmp_path, user_root, model)])
    assert_refused(
        code,
        capsys.readouterr().err,
        tmp_path / "runs",
        "nodes.generate.params.tools: node 'generate': the chat template ignores `tools`",
        "with the schemas of lookup as without them",
    )
    path = _agent_pipeline(tmp_path, user_root, model, tools_in_template=False)
    assert main(["validate", path]) == 0, capsys.readouterr().err  # an explicit choice


def test_a_template_that_renders_tools_passes(tmp_path, user_root, byo_model, capsys):
    assert main(["validate", _agent_pipeline(tmp_path, user_root, byo_model)]) == 0, (
        capsys.readouterr().err
    )
