"""mkdocs hook: adds the reference pages generated from the code (docs/gen_reference.py) to
the build. Nothing is written to docs/, so nothing generated is committed or can drift."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mkdocs.structure.files import File, Files

_GEN = Path(__file__).resolve().parents[1] / "gen_reference.py"


def _generators():
    spec = importlib.util.spec_from_file_location("gen_reference", _GEN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PAGES


def on_files(files: Files, config) -> Files:
    for name, generate in _generators().items():
        files.append(File.generated(config, f"reference/{name}.md", content=generate()))
    return files
