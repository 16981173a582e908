"""Writes the code task's artefacts into a build directory (the addition task's layout).

``DIR/model/`` holds the warmed-up model and the character-level tokenizer, ``DIR/train.parquet``
and ``DIR/test.parquet`` the twenty problems; :mod:`operators.tiny_task.build` wraps this in the
same atomic, ``build.json``-cached build as the addition task.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from operators.tiny_task.build import MODEL_DIR, TEST_FILE, TRAIN_FILE
from operators.tiny_task.coding.params import CodeTaskParams


def build_code_into(root: Path, params: CodeTaskParams) -> dict[str, Any]:
    """Writes every artefact into the empty directory ``root``; returns the stamp's details."""
    import tokenizers
    import torch
    import transformers

    from operators.tiny_task.coding.dataset import write_code_split
    from operators.tiny_task.coding.evaluate import evaluate_code_policy
    from operators.tiny_task.coding.problems import all_code_problems, corpus_lines
    from operators.tiny_task.coding.tokenizer import train_char_tokenizer
    from operators.tiny_task.coding.warmup import warm_up
    from operators.tiny_task.model import build_model
    from operators.tiny_task.warmup import single_thread

    problems = all_code_problems()
    tokenizer = train_char_tokenizer(corpus_lines())
    model = build_model(params.model, tokenizer)
    losses = warm_up(model, tokenizer, problems, params.warmup)
    with single_thread():
        metrics = evaluate_code_policy(
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
    write_code_split(root / TRAIN_FILE, problems, "train")
    write_code_split(root / TEST_FILE, problems, "test")
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
