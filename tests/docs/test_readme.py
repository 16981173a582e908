"""The README and the docs site show the files they document as they are: the README holds
`pipeline.yaml` verbatim and stays short; the docs pages include example files (a
`--8<--` snippet, which `mkdocs build --strict` in `make lint` fails on when the file is
missing) instead of copying them; and every code path the docs name exists."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import ROOT

DOCS = ROOT / "docs"


def yaml_blocks(page: str = "README.md") -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", (ROOT / page).read_text(), re.DOTALL)


def pages() -> list[Path]:
    """The README and every page of the docs site (not the developers' notes in docs/dev)."""
    site = [p for p in DOCS.rglob("*.md") if DOCS / "dev" not in p.parents]
    return [ROOT / "README.md", *sorted(site)]


def included() -> set[str]:
    """Files the docs pages include with a snippet: --8<-- "path"."""
    found: set[str] = set()
    for page in pages():
        found.update(re.findall(r'^--8<-- "([^"]+)"$', page.read_text(), re.MULTILINE))
    return found


# `rldag/...py`, `operators/...py` and `examples/...py` files, and the `module` of
# `module:attr` paths of built-in code, as the docs write them
CODE_FILE = re.compile(r"(?<![\w./-])((?:rldag|operators|flows|tasks|examples)/[\w/]+\.py)")
CODE_ATTR = re.compile(r"(?<![\w./-])((?:rldag|operators|flows|tasks|examples)(?:\.\w+)+):\w")


def missing_code_paths() -> list[str]:
    """Every code path a docs page or the README names that is not in the tree, as
    `page: path`."""
    missing = []
    for page in pages():
        text = page.read_text()
        names = set(CODE_FILE.findall(text))
        for module in CODE_ATTR.findall(text):
            stem = module.replace(".", "/")
            if not (ROOT / f"{stem}.py").is_file() and not (ROOT / stem / "__init__.py").is_file():
                names.add(module)
        for name in sorted(names):
            if "/" in name and not (ROOT / name).is_file():
                missing.append(f"{page.relative_to(ROOT)}: {name}")
            elif "/" not in name:
                missing.append(f"{page.relative_to(ROOT)}: {name}")
    return missing


def test_the_readme_shows_the_pipeline_file_verbatim() -> None:
    assert (ROOT / "pipeline.yaml").read_text() in yaml_blocks()


def test_the_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_the_docs_include_the_example_files_instead_of_copying_them() -> None:
    snippets = included()
    for name in (
        "pipeline.yaml",
        "examples/async.yaml",
        "examples/stream_train.yaml",
        "examples/dapo.yaml",
        "examples/agent_python_tool.yaml",
        "examples/lora.yaml",
        "examples/byo/pipeline.yaml",
    ):
        assert name in snippets, f'no docs page includes {name} (--8<-- "{name}")'
    for name in snippets:
        assert (ROOT / name).is_file(), name


def test_the_byo_guide_includes_its_example() -> None:
    page = (DOCS / "guides" / "bring-your-own-model.md").read_text()
    assert '--8<-- "examples/byo/pipeline.yaml"' in page


def test_every_code_path_the_docs_name_exists() -> None:
    """The docs name code paths as they are after issue 29's move (rldag/engine/driver.py,
    operators.score.rewards.arithmetic:compute_score): this fails until that move lands, and
    then catches every later move."""
    assert missing_code_paths() == []
