"""The tiny default task: a locally trained tokenizer, a warmed-up 3-layer Qwen2, and
single-digit addition data in veRL parquet format; and its code variant
(:mod:`examples.tiny_task.coding`: function-writing problems with assert tests).

``build_tiny_task(DIR)`` (or ``python -m examples.tiny_task --out DIR``) installs the shipped
build into ``DIR`` (:mod:`examples.tiny_task.shipped`; ``force=True`` / ``--rebuild`` trains it
from the recipe instead), ``build_tiny_task(DIR, task="code")`` (``--task code``) the code
variant; see :mod:`examples.tiny_task.build` for the layout. Importing this package is cheap:
torch and transformers are only imported when a build is trained.
"""

from examples.tiny_task.build import TASKS, build_tiny_task, is_built, read_stamp
from examples.tiny_task.coding import CodeTaskParams
from examples.tiny_task.params import EvalParams, ModelParams, TinyTaskParams, WarmupParams
from examples.tiny_task.problems import DATA_SOURCE, Problem, all_problems

__all__ = [
    "DATA_SOURCE",
    "TASKS",
    "CodeTaskParams",
    "EvalParams",
    "ModelParams",
    "Problem",
    "TinyTaskParams",
    "WarmupParams",
    "all_problems",
    "build_tiny_task",
    "is_built",
    "read_stamp",
]
