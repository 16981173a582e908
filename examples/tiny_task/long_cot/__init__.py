"""The long chain-of-thought task: multi-digit addition written digit by digit with carries,
sizes drawn with a long tail, a word-level tokenizer, and a 4-layer Qwen2 warmed up on short
problems only.

Built like the other tiny tasks, by ``build_tiny_task(DIR, task="long_cot")`` or
``python -m examples.tiny_task --task long_cot --out DIR``; its rows are scored by
:func:`examples.tiny_task.long_cot.reward.compute_score`. Importing this package is cheap:
torch and transformers are only imported when a build actually runs.
"""

from examples.tiny_task.long_cot.params import LONG_COT_TASK, LongCotTaskParams
from examples.tiny_task.long_cot.problems import DATA_SOURCE, LongCotProblem, split_problems

__all__ = ["DATA_SOURCE", "LONG_COT_TASK", "LongCotProblem", "LongCotTaskParams", "split_problems"]
