"""The steps every tiny task's build runs, with the task's own pieces plugged in: problems,
a tokenizer trained on the task's corpus, the tiny model, a warm-up, a sampled evaluation
and the veRL-format splits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

MODEL_DIR = "model"
TRAIN_FILE = "train.parquet"
TEST_FILE = "test.parquet"


@dataclass(frozen=True)
class TaskRecipe:
    """A task's pieces (each a plain function of its module)."""

    problems: Callable[[], Sequence[Any]]
    corpus: Callable[[], list[str]]
    train_tokenizer: Callable[[list[str]], Any]
    warm_up: Callable[..., list[float]]
    evaluate: Callable[..., dict[str, Any]]
    write_split: Callable[[Path, Sequence[Any], str], None]


def addition_recipe() -> TaskRecipe:
    """Single-digit addition (the default task)."""
    from examples.tiny_task import dataset, evaluate, problems, tokenizer, warmup

    return TaskRecipe(
        problems.all_problems,
        problems.corpus_lines,
        tokenizer.train_tokenizer,
        warmup.warm_up,
        evaluate.evaluate_policy,
        dataset.write_split,
    )


def code_recipe() -> TaskRecipe:
    """Tiny function-writing problems judged by the sandbox."""
    from examples.tiny_task.coding import evaluate, problems, tokenizer, warmup
    from examples.tiny_task.dataset import write_split

    return TaskRecipe(
        problems.all_code_problems,
        problems.corpus_lines,
        tokenizer.train_char_tokenizer,
        warmup.warm_up,
        evaluate.evaluate_code_policy,
        partial(write_split, data_source=problems.DATA_SOURCE, chat=True),
    )


def long_cot_recipe(params: Any) -> TaskRecipe:
    """Multi-digit addition with a digit-by-digit scratchpad: see
    :mod:`examples.tiny_task.long_cot`. The build's problems are the train split; the test
    split is drawn apart."""
    from examples.tiny_task.dataset import write_split
    from examples.tiny_task.long_cot import evaluate, problems, tokenizer, warmup

    def write(path: Path, rows: Sequence[Any], split: str) -> None:
        chosen = rows if split == "train" else problems.split_problems(params.data, split)
        write_split(path, chosen, split, data_source=problems.DATA_SOURCE)

    return TaskRecipe(
        partial(problems.split_problems, params.data, "train"),
        problems.corpus_lines,
        tokenizer.train_long_cot_tokenizer,
        warmup.warm_up,
        evaluate.evaluate_long_cot_policy,
        write,
    )


def agent_recipe(params: Any) -> TaskRecipe:
    """The tiny agent tasks (``guess``, ``lookup``): see :mod:`examples.tiny_task.agent`."""
    from examples.tiny_task.agent import evaluate, problems, warmup
    from examples.tiny_task.agent.params import GuessTaskParams
    from examples.tiny_task.agent.tokenizer import train_agent_tokenizer
    from examples.tiny_task.dataset import write_split

    if isinstance(params, GuessTaskParams):
        rows = partial(problems.guess_problems, params.low, params.high, params.copies)
        score = evaluate.evaluate_guess
    else:
        rows = partial(problems.lookup_problems, params.keys, params.rows_per_key)
        score = evaluate.evaluate_lookup
    return TaskRecipe(
        rows,
        lambda: problems.corpus_lines(rows(), calls=not isinstance(params, GuessTaskParams)),
        train_agent_tokenizer,
        partial(warmup.warm_up, task=params),
        score,
        partial(write_split, data_source=params.task),
    )


def build_task_into(root: Path, params: Any, recipe: TaskRecipe) -> dict[str, Any]:
    """Write model, tokenizer and splits into the empty directory `root`; return what the
    build measured (for build.json)."""
    import tokenizers
    import torch
    import transformers

    from examples.tiny_task.model import build_model
    from examples.tiny_task.warmup import single_thread

    problems = recipe.problems()
    tokenizer = recipe.train_tokenizer(recipe.corpus())
    model = build_model(params.model, tokenizer)
    losses = recipe.warm_up(model, tokenizer, problems, params.warmup)
    with single_thread():
        metrics = recipe.evaluate(
            model,
            tokenizer,
            problems,
            samples_per_problem=params.eval.samples_per_problem,
            temperature=params.eval.temperature,
            max_new_tokens=params.eval.max_new_tokens,
            seed=params.eval.seed,
        )
    model.save_pretrained(root / MODEL_DIR)
    tokenizer.save_pretrained(root / MODEL_DIR)
    recipe.write_split(root / TRAIN_FILE, problems, "train")
    recipe.write_split(root / TEST_FILE, problems, "test")
    return {
        "warmup": {"first_loss": losses[0], "final_loss": losses[-1], **metrics},
        "problems": len(problems),
        "vocab_size": len(tokenizer),
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "libraries": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        },
    }
