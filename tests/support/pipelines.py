"""Small pipelines the tests write: a model-free scoring pipeline and the five GRPO nodes."""

from __future__ import annotations

from pathlib import Path


def scoring_pipeline(dataset: Path, **extra: object) -> dict:
    """A model-free pipeline: source -> answer (user operator) -> score (user function) ->
    advantage."""
    spec = {
        "name": "scoring",
        "iterations": 2,
        "model": {"path": "unused"},
        "nodes": {
            "prompts": {
                "kind": "source",
                "op": "dataset",
                "params": {"path": str(dataset), "batch_size": 4},
            },
            "answer": {
                "kind": "transform",
                "op": "tests.support.user_code:ANSWER_HALF",
                "inputs": {"prompts": "prompts"},
            },
            "score": {
                "kind": "score",
                "op": "tests.support.user_code:echo_score",
                "inputs": {"rollouts": "answer"},
            },
            "advantage": {
                "kind": "transform",
                "op": "grpo_advantage",
                "inputs": {"scored": "score"},
            },
        },
    }
    spec.update(extra)
    return spec


def grpo_nodes(
    model: str,
    data: Path,
    score_op: str,
    *,
    generate: dict | None = None,
    train: dict | None = None,
) -> dict:
    """The five nodes of a GRPO pipeline: prompts -> generate -> score -> advantage -> train
    (the weights edge from train back into generate)."""
    return {
        "prompts": {"kind": "source", "op": "dataset", "params": {"path": str(data)}},
        "generate": {
            "kind": "generate",
            "op": "torch_engine",
            "inputs": {"prompts": "prompts", "weights": "train"},
            "params": {"model_path": model, **(generate or {})},
        },
        "score": {"kind": "score", "op": score_op, "inputs": {"rollouts": "generate"}},
        "advantage": {"kind": "transform", "op": "grpo_advantage", "inputs": {"scored": "score"}},
        "train": {
            "kind": "train",
            "op": "policy_gradient",
            "inputs": {"batch": "advantage"},
            "params": {"model_path": model, **(train or {})},
        },
    }
