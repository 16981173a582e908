"""The tiny code task: twenty function-writing problems with assert tests, a character-level
tokenizer, and the tiny Qwen2 warmed up on the reference solutions.

Built like the addition task, by ``build_tiny_task(DIR, task="code")`` or
``python -m examples.tiny_task --task code --out DIR``; its rows are run by the
``sandbox.python`` node and scored by ``pass_rate``. Importing this package is cheap: torch and
transformers are only imported when a build actually runs.
"""

from examples.tiny_task.coding.params import CODE_TASK, CodeTaskParams, CodeWarmupParams
from examples.tiny_task.coding.problems import DATA_SOURCE, CodeProblem, all_code_problems

__all__ = [
    "CODE_TASK",
    "DATA_SOURCE",
    "CodeProblem",
    "CodeTaskParams",
    "CodeWarmupParams",
    "all_code_problems",
]
