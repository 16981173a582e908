"""Builds the tiny task directory atomically and caches it behind a ``build.json`` stamp.

Two tasks share this: ``addition`` (the default; :class:`TinyTaskParams`) and ``code``
(:class:`CodeTaskParams`, see :mod:`examples.tiny_task.coding`); the parameters' type selects
the task. Layout of a build::

    DIR/model/          config.json, generation_config.json, model.safetensors, tokenizer files
    DIR/train.parquet   all problems (100 additions or 20 code problems), veRL format, "train"
    DIR/test.parquet    the same problems, split "test"
    DIR/build.json      builder name/version, (task,) parameters, and the warm-up's measurements
    DIR/SHA256SUMS      the SHA-256 of every other file

Where the project ships a build with these parameters (:mod:`examples.tiny_task.shipped`),
it is installed (copied, checked by its checksums) instead of trained, so every machine gets
the same weights; ``force`` trains one here from the recipe instead.

The build happens in a temporary directory next to ``DIR`` that is renamed into place at the
end, so an interrupted build never leaves a half-written ``DIR``. A later call whose builder
version and parameters match ``build.json`` returns at once without importing torch.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from examples.tiny_task.agent.params import (
    AGENT_BUILDER_VERSION,
    GUESS_TASK,
    LOOKUP_TASK,
    AgentTaskParams,
    GuessTaskParams,
    LookupTaskParams,
)
from examples.tiny_task.coding.params import CODE_BUILDER_VERSION, CODE_TASK, CodeTaskParams
from examples.tiny_task.long_cot.params import (
    LONG_COT_BUILDER_VERSION,
    LONG_COT_TASK,
    LongCotTaskParams,
)
from examples.tiny_task.params import TinyTaskParams
from examples.tiny_task.shipped import install, is_installed, shipped_build, write_checksums

# The recipe's name in build.json: where it lived when the shipped builds were made.
BUILDER = "operators.tiny_task"
BUILDER_VERSION = 1
STAMP_FILE = "build.json"
REBUILD_HELP = (
    "train from the recipe on this machine instead of installing the shipped build "
    "(the weights then depend on this CPU's float kernels)"
)

TaskParams = TinyTaskParams | CodeTaskParams | AgentTaskParams | LongCotTaskParams
TASKS: dict[str, type[TaskParams]] = {
    "addition": TinyTaskParams,
    CODE_TASK: CodeTaskParams,
    GUESS_TASK: GuessTaskParams,
    LOOKUP_TASK: LookupTaskParams,
    LONG_COT_TASK: LongCotTaskParams,
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
    if isinstance(params, LongCotTaskParams):
        key = {"builder": BUILDER, "task": LONG_COT_TASK, "version": LONG_COT_BUILDER_VERSION}
        return {**key, "params": params.to_dict()}
    return {"builder": BUILDER, "version": BUILDER_VERSION, "params": params.to_dict()}


def read_stamp(out: Path) -> dict[str, Any] | None:
    """``DIR/build.json`` as a dict, or None when it is missing or unreadable."""
    try:
        stamp = json.loads((Path(out) / STAMP_FILE).read_text())
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) else None


def matches(out: Path, key: dict[str, Any]) -> bool:
    """Whether ``out`` holds a finished build whose stamp carries ``key``: where the project
    ships a build with that key, exactly the shipped files."""
    stamp = read_stamp(out)
    if stamp is None or not all(stamp.get(name) == value for name, value in key.items()):
        return False
    shipped = shipped_build(key)
    return shipped is None or is_installed(Path(out), shipped)


def is_built(out: Path, params: TaskParams | None = None) -> bool:
    """Whether ``out`` holds a finished build made with ``params`` by this builder version
    (where the project ships one, exactly the shipped files)."""
    return matches(out, cache_key(params or TinyTaskParams()))


def _build_into(root: Path, params: TaskParams) -> dict[str, Any]:
    """Writes every artefact of ``params``' task into the empty directory ``root``; returns the
    stamp."""
    from examples.tiny_task.recipe import (
        addition_recipe,
        agent_recipe,
        build_task_into,
        code_recipe,
        long_cot_recipe,
    )

    if isinstance(params, GuessTaskParams | LookupTaskParams):
        recipe = agent_recipe(params)
    elif isinstance(params, CodeTaskParams):
        recipe = code_recipe()
    elif isinstance(params, LongCotTaskParams):
        recipe = long_cot_recipe(params)
    else:
        recipe = addition_recipe()
    return build_task_into(root, params, recipe)


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
    """Installs the shipped build of the task into ``out`` (checked by its checksums), or,
    where none ships with these parameters or with ``force``, trains the tokenizer and
    warmed-up model and writes the parquet splits there; returns ``out``.

    ``params`` (default: the default parameters of ``task``) selects the task. Does nothing
    when ``out`` is up to date (:func:`is_built`; unless ``force``). Refuses to replace a
    non-empty directory that is not a previous tiny_task build.
    """
    if params is None:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
        params = TASKS[task]()
    chosen = params
    return build_keyed(out, cache_key(chosen), lambda root: _build_into(root, chosen), force)


def build_keyed(
    out: Path | str, key: dict[str, Any], train: Callable[[Path], dict[str, Any]], force: bool
) -> Path:
    """Makes ``out`` a build stamped with ``key``: the shipped build with that key, installed,
    or (none shipped, or ``force``) one that ``train`` writes into an empty directory, its
    returned stamp and checksums added. Atomic: a temporary directory beside ``out`` is
    renamed into place; a build already up to date (:func:`matches`) is kept."""
    out = Path(out).absolute()
    if not force and matches(out, key):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        os.chmod(tmp, 0o755)
        shipped = None if force else shipped_build(key)
        if shipped is not None:
            install(shipped, tmp)
        else:
            stamp = {**train(tmp), **key}
            (tmp / STAMP_FILE).write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n")
            write_checksums(tmp)
        for path in tmp.rglob("*"):
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        if not force and matches(out, key):  # a concurrent build finished first
            return out
        try:
            _move_into_place(tmp, out)
        except OSError:
            if not matches(out, key):  # lost a race only if the winner built the same
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def build_and_say(
    out: Path, key: dict[str, Any], build: Callable[[], Path], rebuild: bool
) -> tuple[Path, str]:
    """Runs ``build`` (which makes ``out`` a build stamped with ``key``) and says what it did:
    kept an up-to-date build, installed the shipped one, or trained one here."""
    cached = not rebuild and matches(out, key)
    shipped = None if rebuild else shipped_build(key)
    start = time.perf_counter()
    built = build()
    if cached:
        state = "up to date (the shipped build's checksums match)" if shipped else "up to date"
    elif shipped:
        state = f"installed {shipped} (every file checked against its SHA256SUMS)"
    else:
        state = f"trained here in {time.perf_counter() - start:.1f}s"
    return built, f"{built}: {state}"
