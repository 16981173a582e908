"""Builds the tiny task directory atomically and caches it behind a ``build.json`` stamp.

Two tasks share this: ``addition`` (the default; :class:`TinyTaskParams`) and ``code``
(:class:`CodeTaskParams`, see :mod:`operators.tiny_task.coding`); the parameters' type selects
the task. Layout of a build::

    DIR/model/          config.json, generation_config.json, model.safetensors, tokenizer files
    DIR/train.parquet   all problems (100 additions or 20 code problems), veRL format, "train"
    DIR/test.parquet    the same problems, split "test"
    DIR/build.json      builder name/version, (task,) parameters, and the warm-up's measurements

The build happens in a temporary directory next to ``DIR`` that is renamed into place at the
end, so an interrupted build never leaves a half-written ``DIR``. A later call whose builder
version and parameters match ``build.json`` returns at once without importing torch.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from operators.tiny_task.agent.params import (
    AGENT_BUILDER_VERSION,
    GUESS_TASK,
    LOOKUP_TASK,
    AgentTaskParams,
    GuessTaskParams,
    LookupTaskParams,
)
from operators.tiny_task.coding.params import CODE_BUILDER_VERSION, CODE_TASK, CodeTaskParams
from operators.tiny_task.params import TinyTaskParams

BUILDER = "operators.tiny_task"
BUILDER_VERSION = 1
STAMP_FILE = "build.json"

TaskParams = TinyTaskParams | CodeTaskParams | AgentTaskParams
TASKS: dict[str, type[TaskParams]] = {
    "addition": TinyTaskParams,
    CODE_TASK: CodeTaskParams,
    GUESS_TASK: GuessTaskParams,
    LOOKUP_TASK: LookupTaskParams,
}


def cache_key(params: TaskParams) -> dict[str, Any]:
    """The part of ``build.json`` that must match for a build to be reused.

    The addition task's key has no ``task`` entry (it predates the code task), so its existing
    builds stay valid.
    """
    if isinstance(params, CodeTaskParams):
        key = {"builder": BUILDER, "task": CODE_TASK, "version": CODE_BUILDER_VERSION}
        return {**key, "params": params.to_dict()}
    if isinstance(params, GuessTaskParams | LookupTaskParams):
        key = {"builder": BUILDER, "task": params.task, "version": AGENT_BUILDER_VERSION}
        return {**key, "params": params.to_dict()}
    return {"builder": BUILDER, "version": BUILDER_VERSION, "params": params.to_dict()}


def read_stamp(out: Path) -> dict[str, Any] | None:
    """``DIR/build.json`` as a dict, or None when it is missing or unreadable."""
    try:
        stamp = json.loads((Path(out) / STAMP_FILE).read_text())
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) else None


def is_built(out: Path, params: TaskParams | None = None) -> bool:
    """Whether ``out`` holds a finished build made with ``params`` by this builder version."""
    stamp = read_stamp(out)
    if stamp is None:
        return False
    key = cache_key(params or TinyTaskParams())
    return all(stamp.get(name) == value for name, value in key.items())


def _build_into(root: Path, params: TaskParams) -> dict[str, Any]:
    """Writes every artefact of ``params``' task into the empty directory ``root``; returns the
    stamp."""
    from operators.tiny_task.recipe import (
        addition_recipe,
        agent_recipe,
        build_task_into,
        code_recipe,
    )

    if isinstance(params, GuessTaskParams | LookupTaskParams):
        recipe = agent_recipe(params)
    elif isinstance(params, CodeTaskParams):
        recipe = code_recipe()
    else:
        recipe = addition_recipe()
    return {**cache_key(params), **build_task_into(root, params, recipe)}


def _move_into_place(tmp: Path, out: Path) -> None:
    """Renames ``tmp`` to ``out``, first moving aside (then deleting) an outdated ``out``."""
    old: Path | None = None
    if out.exists():
        if read_stamp(out) is None and any(out.iterdir()):
            raise FileExistsError(f"{out} is not empty and is not a tiny_task build")
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.replace(out, old / out.name)
    os.rename(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def build_tiny_task(
    out: Path | str,
    *,
    force: bool = False,
    params: TaskParams | None = None,
    task: str = "addition",
) -> Path:
    """Builds the tokenizer, warmed-up model and parquet splits into ``out``; returns ``out``.

    ``params`` (default: the default parameters of ``task``, ``addition`` or ``code``) selects
    the task. Does nothing when ``out/build.json`` matches this builder and ``params`` (unless
    ``force``). Refuses to replace a non-empty directory that is not a previous tiny_task build.
    """
    out = Path(out).absolute()
    if params is None:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
        params = TASKS[task]()
    if not force and is_built(out, params):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        os.chmod(tmp, 0o755)
        stamp = _build_into(tmp, params)
        (tmp / STAMP_FILE).write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n")
        for path in tmp.rglob("*"):
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        if not force and is_built(out, params):  # a concurrent build finished first
            return out
        try:
            _move_into_place(tmp, out)
        except OSError:
            if not is_built(out, params):  # lost a race only if the winner built the same
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
