"""What the GRPO races share: the work both sides do, a contestant's result, and TRL's
``GRPOTrainer`` as a contestant (per-step seconds and the reward against wall-clock seconds).

Used by ``bench/e2e_vs_trl.py`` (the addition race) and ``bench/long_cot_race.py``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

Score = Callable[[str, str], float]  # (completion text, ground truth) -> reward


@dataclass
class Work:
    steps: int
    prompts: int  # prompts per step
    group: int  # completions per prompt
    max_new_tokens: int
    lr: float
    threads: int
    fixed_length: bool = False  # every completion exactly max_new_tokens long (eos ignored)
    rldag: tuple[str, ...] = ()  # more pipeline overrides for rldag (e.g. async settings)

    @property
    def samples(self) -> int:
        return self.steps * self.prompts * self.group


@dataclass
class Result:
    name: str
    step_s: list[float]  # seconds of each optimizer step
    note: str = ""
    curve: list[tuple[float, float]] = field(default_factory=list)  # (s since step 1, reward)

    @property
    def per_step(self) -> float:
        """Mean seconds per step after the first (steady state: no setup, no warm-up)."""
        return statistics.mean(self.step_s[1:] or self.step_s)

    @property
    def first(self) -> float:
        return self.step_s[0]


def problems(train: Path) -> list[tuple[str, str]]:
    """(prompt, ground truth) of each row of a veRL-format parquet."""
    table = pq.read_table(train).to_pylist()
    return [(r["prompt"], r["reward_model"]["ground_truth"]) for r in table]


def run_trl(model: Path, train: Path, score: Score, work: Work) -> Result:
    """TRL 1.x GRPOTrainer on CPU (``use_cpu``, fp32, ``beta=0``, one optimizer step per batch
    of ``prompts x group`` completions); per-step times and rewards from a callback."""
    from datasets import Dataset
    from transformers import AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    data = problems(train)
    dataset = Dataset.from_list([{"prompt": p, "ground_truth": g} for p, g in data])

    def correct(prompts, completions, ground_truth, **_) -> list[float]:
        return [score(c, g) for c, g in zip(completions, ground_truth, strict=True)]

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self.curve: list[tuple[float, float]] = []
            self.start = self.began = 0.0

        def on_train_begin(self, args, state, control, **kw):
            self.began = time.perf_counter()

        def on_step_begin(self, args, state, control, **kw):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self.start)

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                self.curve.append((time.perf_counter() - self.began, float(logs["reward"])))

    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=work.prompts * work.group,
            num_generations=work.group,
            max_completion_length=work.max_new_tokens,
            max_steps=work.steps,
            learning_rate=work.lr,
            lr_scheduler_type="constant",
            weight_decay=0.0,
            max_grad_norm=1.0,
            temperature=1.0,
            top_k=0,
            beta=0.0,
            use_cpu=True,
            bf16=False,
            logging_steps=1,
            report_to=[],
            save_strategy="no",
            disable_tqdm=True,
            dataloader_num_workers=0,
            seed=0,
            generation_kwargs={"min_new_tokens": work.max_new_tokens}
            if work.fixed_length
            else None,
        )
        trainer = GRPOTrainer(
            model=str(model),
            reward_funcs=correct,
            args=config,
            train_dataset=dataset,
            processing_class=AutoTokenizer.from_pretrained(model),
            callbacks=[timer],
        )
        trainer.remove_callback(PrinterCallback)  # no per-step log dicts on stdout
        trainer.train()
    return Result("TRL GRPOTrainer", timer.times, curve=timer.curve)
