"""The tiny reward model: a 2-layer Qwen2 sequence classifier (one label) trained to tell
correct from wrong answers of the addition task, for tests and examples of `reward_model`.

``build_tiny_reward_model(DIR)`` (or ``python -m examples.tiny_task.reward_model --out DIR``)
writes ``DIR`` (config, weights, the tiny task's tokenizer, ``build.json``). The tokenizer is
trained here as the tiny policy's is (the same one), so the reward model builds beside the
policy rather than after it;
deterministic, and cached like the tiny policy: a build whose stamp matches returns at once.
Its input is what the `reward_model` operator scores: prompt text + response text.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from examples.tiny_task.build import REBUILD_HELP, build_and_say, build_keyed, read_stamp

# Its name in the shipped build.json: where it lived when the build was made.
BUILDER = "operators.tiny_task.reward_model"
VERSION = 2
JUNK = ("", "+", "=", "1+", "==", "00", "+1", "9=")  # malformed answers a policy emits
LONG_NUMBERS = 3  # random 3-4 digit numbers per problem among the wrong answers


@dataclass(frozen=True)
class RewardModelParams:
    """Architecture and training of the tiny reward model."""

    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    steps: int = 400
    problems_per_step: int = 16
    learning_rate: float = 1e-3
    seed: int = 0


def _key(params: RewardModelParams) -> dict[str, Any]:
    return {"builder": BUILDER, "version": VERSION, "params": asdict(params)}


def too_long(answer: str, rng: random.Random) -> list[str]:
    """Over-long answers, 3-4 digits (a policy writes up to 4 tokens): the right sum repeated
    or followed by zeros, and random numbers. Without them a policy learned to write such
    numbers, which the reward model never saw and could score above the right sum."""
    numbers = [str(rng.randrange(100, 10_000)) for _ in range(LONG_NUMBERS)]
    return [(answer * 3)[:4], answer + "00", *numbers]


def candidate_lists(seed: int = 0) -> list[list[str]]:
    """Per problem, prompt + response texts: the right sum first, then every wrong sum 0..18,
    malformed and over-long answers."""
    from examples.tiny_task.problems import all_problems

    rng = random.Random(seed)
    lists = []
    for p in all_problems():
        wrong = [str(n) for n in range(19) if str(n) != p.answer]
        wrong += [*JUNK, *too_long(p.answer, rng)]
        lists.append([p.prompt + a for a in [p.answer, *wrong]])
    return lists


def candidate_scores(model: Any, tokenizer: Any, batch: list[list[str]]) -> Any:
    """The reward model's scores of every candidate text, shaped (problems, candidates)."""
    enc = tokenizer([t for c in batch for t in c], return_tensors="pt", padding=True)
    return model(**enc).logits.view(len(batch), -1)


def right_sum_ranked_first(model: Any, tokenizer: Any, seed: int = 0) -> float:
    """The share of problems on which ``model`` scores the right sum above every other
    candidate (:func:`candidate_lists`)."""
    import torch

    with torch.no_grad():
        ranks = candidate_scores(model, tokenizer, candidate_lists(seed)).argmax(-1)
    return float((ranks == 0).float().mean())


def _train(root: Path, params: RewardModelParams) -> dict[str, Any]:
    import torch
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    from examples.tiny_task.recipe import addition_recipe
    from examples.tiny_task.warmup import single_thread

    recipe = addition_recipe()
    tokenizer = recipe.train_tokenizer(recipe.corpus())  # the tiny policy's tokenizer
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=params.hidden_size,
        intermediate_size=2 * params.hidden_size,
        num_hidden_layers=params.num_hidden_layers,
        num_attention_heads=params.num_attention_heads,
        num_key_value_heads=params.num_attention_heads,
        max_position_embeddings=64,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
        use_sliding_window=False,
    )
    lists = candidate_lists(params.seed)
    rng = random.Random(params.seed)

    with single_thread(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(params.seed)
        model = Qwen2ForSequenceClassification(config).float()
        optim = torch.optim.AdamW(model.parameters(), lr=params.learning_rate)
        target = torch.zeros(params.problems_per_step, dtype=torch.long)  # the right sum
        for _ in range(params.steps):  # listwise: softmax over one problem's answers
            loss = torch.nn.functional.cross_entropy(
                candidate_scores(model, tokenizer, rng.sample(lists, params.problems_per_step)),
                target,
            )
            optim.zero_grad()
            loss.backward()
            optim.step()
        model.eval()
        ranked_first = right_sum_ranked_first(model, tokenizer, params.seed)
    model.save_pretrained(root)
    tokenizer.save_pretrained(root)
    return {"right_sum_ranked_first": round(ranked_first, 4), "final_loss": round(loss.item(), 4)}


def build_tiny_reward_model(
    out: Path | str, params: RewardModelParams | None = None, *, force: bool = False
) -> Path:
    """Installs the shipped tiny reward model into ``out`` (or, where none ships with these
    parameters or with ``force``, trains it there); returns ``out``."""
    params = params or RewardModelParams()
    return build_keyed(out, _key(params), lambda root: _train(root, params), force)


def main(argv: list[str] | None = None) -> int:
    """``--out DIR``: build the tiny reward model and say how well it ranks."""
    parser = argparse.ArgumentParser(prog="python -m examples.tiny_task.reward_model")
    parser.add_argument("--out", type=Path, default=Path(".cache/tiny_rm"))
    parser.add_argument("--rebuild", action="store_true", help=REBUILD_HELP)
    args = parser.parse_args(argv)
    params = RewardModelParams()
    out, said = build_and_say(
        args.out.absolute(),
        _key(params),
        lambda: build_tiny_reward_model(args.out, params, force=args.rebuild),
        args.rebuild,
    )
    print(f"{said}\n  right sum ranked first {read_stamp(out)['right_sum_ranked_first']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
