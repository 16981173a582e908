"""The README shows the files it documents as they are."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def yaml_blocks(page: str = "README.md") -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", (ROOT / page).read_text(), re.DOTALL)


@pytest.mark.parametrize(
    "name",
    [
        "pipeline.yaml",
        "examples/async.yaml",
        "examples/dapo.yaml",
        "examples/agent_python_tool.yaml",
        "examples/lora.yaml",
    ],
)
def test_the_readme_shows_the_pipeline_file_verbatim(name: str) -> None:
    assert (ROOT / name).read_text() in yaml_blocks()


def test_the_byo_guide_shows_its_example_verbatim() -> None:
    example = (ROOT / "examples" / "byo" / "pipeline.yaml").read_text()
    assert example in yaml_blocks("docs/bring-your-own-model.md")
