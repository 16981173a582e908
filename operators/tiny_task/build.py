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

from operators.tiny_task.coding.params import CODE_BUILDER_VERSION, CODE_TASK, CodeTaskParams
from operators.tiny_task.params import TinyTaskParams

BUILDER = "operators.tiny_task"
BUILDER_VERSION = 1
STAMP_FILE = "build.json"
MODEL_DIR = "model"
TRAIN_FILE = "train.parquet"
TEST_FILE = "test.parquet"

TaskParams = TinyTaskParams | CodeTaskParams
TASKS: dict[str, type[TinyTaskParams] | type[CodeTaskParams]] = {
    "addition": TinyTaskParams,
    CODE_TASK: CodeTaskParams,
}


def cache_key(params: TaskParams) -> dict[str, Any]:
    """The part of ``build.json`` that must match for a build to be reused.

    The addition task's key has no ``task`` entry (it predates the code task), so its existing
    builds stay valid.
    """
    if isinstance(params, CodeTaskParams):
        key = {"builder": BUILDER, "task": CODE_TASK, "version": CODE_BUILDER_VERSION}
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
    if isinstance(params, CodeTaskParams):
        from operators.tiny_task.coding.build import build_code_into

        return {**cache_key(params), **build_code_into(root, params)}
    return _build_addition_into(root, params)


def _build_addition_into(root: Path, params: TinyTaskParams) -> dict[str, Any]:
    """Writes the addition task's artefacts into the empty directory ``root``; returns the
    stamp."""
    import tokenizers
    import torch
    import transformers

    from operators.tiny_task.dataset import write_split
    from operators.tiny_task.evaluate import evaluate_policy
    from operators.tiny_task.model import build_model
    from operators.tiny_task.problems import all_problems, corpus_lines
    from operators.tiny_task.tokenizer import train_tokenizer
    from operators.tiny_task.warmup import single_thread, warm_up

    problems = all_problems()
    tokenizer = train_tokenizer(corpus_lines())
    model = build_model(params.model, tokenizer)
    losses = warm_up(model, tokenizer, problems, params.warmup)
    with single_thread():
        metrics = evaluate_policy(
            model,
            tokenizer,
            problems,
            samples_per_problem=params.eval.samples_per_problem,
            temperature=params.eval.temperature,
            max_new_tokens=params.eval.max_new_tokens,
            seed=params.eval.seed,
        )
    model_dir = root / MODEL_DIR
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    write_split(root / TRAIN_FILE, problems, "train")
    write_split(root / TEST_FILE, problems, "test")
    return {
        **cache_key(params),
        "warmup": {"first_loss": losses[0], "final_loss": losses[-1], **metrics},
        "vocab_size": len(tokenizer),
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "libraries": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        },
    }


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
