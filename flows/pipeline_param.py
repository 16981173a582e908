"""The `pipeline` parameter of the `rldag` flow: a path to pipeline.yaml, or its YAML text.

A deployment stores either the absolute path (the file is read at each run, so edits take
effect) or the resolved text (self-contained: the run uses exactly what was deployed).
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from rldag.config.spec import LoadedPipeline


def pipeline_parameter(path: str | Path, loaded: LoadedPipeline, embed: bool) -> str:
    """The value to deploy: the resolved YAML text if `embed`, else the absolute path."""
    return loaded.resolved_yaml if embed else str(Path(path).resolve())


def pipeline_file(pipeline: str) -> Path:
    """A file to load: `pipeline` itself if it is a path, else its text written to a file
    named after its hash (so error messages point at a file one can open)."""
    if "\n" not in pipeline.strip():
        return Path(pipeline)
    digest = hashlib.sha256(pipeline.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"rldag-pipeline-{digest}" / "pipeline.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(pipeline)
    return path
