"""Issue 29's move of the core and the operators into folders by concern: `git mv` per the path
table below, then every mention of an old module (`rldag.spec`, `operators.agent.loop:...`) or
file (`rldag/spec.py`) in the repository rewritten to the new one.

Run from the repository root on the old layout: ``python scripts/move29/code.py``. With
``--text-only FILE...`` it rewrites only the mentions in the given files (for text written
against the old layout after the move). The same table is the source of the compatibility
map for paths users wrote (`rldag/config/moved.py`, `operators/moved.py`).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

CORE = {
    "rldag/errors.py": "rldag/config/errors.py",
    "rldag/spec.py": "rldag/config/spec.py",
    "rldag/tracking_spec.py": "rldag/config/tracking.py",
    "rldag/overrides.py": "rldag/config/overrides.py",
    "rldag/model_paths.py": "rldag/config/model_paths.py",
    "rldag/graph.py": "rldag/graph/dag.py",
    "rldag/operator.py": "rldag/graph/operator.py",
    "rldag/registry.py": "rldag/graph/registry.py",
    "rldag/schema.py": "rldag/graph/schema.py",
    "rldag/metrics.py": "rldag/engine/metrics.py",
    "rldag/driver.py": "rldag/engine/driver.py",
    "rldag/scheduler.py": "rldag/engine/scheduler.py",
    "rldag/run.py": "rldag/engine/run.py",
    "rldag/streams.py": "rldag/engine/streams.py",
    "rldag/events.py": "rldag/engine/events.py",
    "rldag/checkpoints.py": "rldag/engine/checkpoints.py",
    "rldag/storage.py": "rldag/storage/store.py",
    "rldag/run_lock.py": "rldag/storage/run_lock.py",
    "rldag/stored_run.py": "rldag/storage/stored_run.py",
    "rldag/parquet_io.py": "rldag/storage/parquet_io.py",
    "rldag/pools.py": "rldag/compute/in_process.py",
    "rldag/ray_pools.py": "rldag/compute/ray_pools.py",
    "rldag/ray_cluster.py": "rldag/compute/cluster.py",
    "rldag/worker.py": "rldag/compute/worker.py",
    "rldag/placement.py": "rldag/compute/placement.py",
    "rldag/dispatch.py": "rldag/compute/dispatch.py",
    "rldag/log_capture.py": "rldag/compute/log_capture.py",
    "rldag/allocator.py": "rldag/compute/allocator.py",
    "rldag/weights.py": "rldag/compute/weights/wire.py",
    "rldag/weight_buckets.py": "rldag/compute/weights/buckets.py",
    "rldag/shared_buckets.py": "rldag/compute/weights/shared_buckets.py",
    "rldag/weight_broadcast.py": "rldag/compute/weights/broadcast.py",
    "rldag/broadcast_edges.py": "rldag/compute/weights/edges.py",
    "rldag/costs.py": "rldag/planning/costs.py",
    "rldag/simulator.py": "rldag/planning/simulator.py",
    "rldag/auto_plan.py": "rldag/planning/auto_plan.py",
    "rldag/profiling.py": "rldag/planning/profiling.py",
    "rldag/report.py": "rldag/report/rollouts.py",
    "rldag/trajectory.py": "rldag/report/trajectory.py",
    "rldag/trackers": "rldag/report/trackers",
    "rldag/plan_view.py": "rldag/console/plan.py",
    "rldag/auto_plan_view.py": "rldag/console/auto_plan.py",
    "rldag/progress.py": "rldag/console/progress.py",
}

OPERATORS = {
    "operators/data": "operators/source",
    "operators/generate.py": "operators/generate/single_turn.py",
    "operators/policy_engine.py": "operators/generate/policy_engine.py",
    "operators/prompt_checks.py": "operators/generate/prompt_checks.py",
    "operators/agent": "operators/generate/agent",
    "operators/sandbox_exec.py": "operators/sandbox/node.py",
    "operators/score.py": "operators/score/reward_function.py",
    "operators/reward_call.py": "operators/score/reward_call.py",
    "operators/reward_worker.py": "operators/score/reward_worker.py",
    "operators/reward_signature.py": "operators/score/reward_signature.py",
    "operators/rewards": "operators/score/rewards",
    "operators/reward_service": "operators/score/reward_service",
    "operators/reward_shaping.py": "operators/transform/reward_shaping.py",
    "operators/advantage.py": "operators/transform/advantage.py",
    "operators/dynamic_sampling.py": "operators/transform/dynamic_sampling.py",
    "operators/kl_reward.py": "operators/transform/kl_reward.py",
    "operators/overlong_penalty.py": "operators/transform/overlong_penalty.py",
    "operators/hf.py": "operators/model/hf.py",
    "operators/lora_weights.py": "operators/model/lora_weights.py",
    "operators/prompts.py": "operators/model/prompts.py",
    "operators/tokenizer_checks.py": "operators/model/tokenizer_checks.py",
    "operators/tiny_task": "examples/tiny_task",
}

MOVES = {**CORE, **OPERATORS}

PACKAGES = {  # new package -> the sentence its __init__ says
    "rldag/config": (
        "pipeline.yaml to a validated PipelineSpec: the spec, overrides, model "
        "paths and the error types."
    ),
    "rldag/graph": (
        "The typed DAG of one iteration: nodes and edges, the operator "
        "contract, Arrow column schemas, the registry."
    ),
    "rldag/engine": (
        "The one loop: the scheduler, a run (execute and persist a step), "
        "streams, events, checkpoints, metrics."
    ),
    "rldag/storage": (
        "Run storage under a URI (file, s3), the run lock, Parquet reads, reading a stored run."
    ),
    "rldag/compute": (
        "Where operators run: in-process and Ray pools, worker actors, "
        "placement, dispatch, process setup."
    ),
    "rldag/compute/weights": (
        "The weights edge: the wire format, buckets, shared-memory buckets, the"
        " broadcast group, edges between groups."
    ),
    "rldag/planning": ("The cost model, the simulator, `plan --auto` and `plan --profile`."),
    "rldag/report": (
        "What a run shows besides its tables: the reward curve, sample rollouts"
        " and trajectories, experiment trackers."
    ),
    "rldag/console": ("Rich terminal output: `plan`, `plan --auto`, progress, `inspect`."),
    "operators/generate": (
        "Generate nodes: n samples per prompt from the policy, and the multi-turn agent loop."
    ),
    "operators/score": (
        "Score nodes: reward functions, reward calls and workers, the reward service."
    ),
    "operators/transform": (
        "Transform nodes: advantages, dynamic sampling, reward shaping (KL, overlong)."
    ),
    "operators/model": (
        "The policy model's plumbing shared by generate, rollout, score and "
        "train: loading, LoRA weights, prompts, tokenizer checks."
    ),
    "examples": (
        "Code of the example pipelines: the tiny demo tasks' builders. Not "
        "installed; run from the repository root."
    ),
}

EXCLUDE_DIRS = {".git", ".venv", ".cache", "__pycache__", "tiny_models", "rldag.egg-info", "site"}
EXCLUDE_FILES = {"docs/dev/floor-plan-issue-29.md", "scripts/move29/code.py"}
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".sh", ".txt", ".json"}
TEXT_NAMES = {"Makefile", "run"}


def module(path: str) -> str:
    """`rldag/spec.py` -> `rldag.spec`; `operators/agent` -> `operators.agent`."""
    return path.removesuffix(".py").replace("/", ".")


def _submodules(new_package: str) -> set[str]:
    """Names directly below `new_package` in the new layout (files and folders)."""
    prefix = new_package + "/"
    return {
        new[len(prefix) :].split("/")[0].removesuffix(".py")
        for new in MOVES.values()
        if new.startswith(prefix)
    }


def _dotted_pattern(old: str) -> str:
    """A regex for the module of `old` as a whole dotted name; an old module whose name is now
    a package is not matched where one of that package's new submodules follows it."""
    name = re.escape(module(old))
    new_package = old.removesuffix(".py")
    if old.endswith(".py") and any(new.startswith(new_package + "/") for new in MOVES.values()):
        later = "|".join(sorted(_submodules(new_package)))
        name += rf"(?!\.(?:{later})\b)"
    return rf"(?<![\w./]){name}(?![\w])"


def rewrites() -> list[tuple[re.Pattern[str], dict[str, str]]]:
    """The dotted-module and file-path rewrites, longest names first (one pass each)."""
    dotted = {module(old): module(new) for old, new in MOVES.items()}
    slashed = {}
    for old, new in MOVES.items():
        slashed[old] = new
        if not old.endswith(".py"):
            slashed[old + "/"] = new + "/"
    dotted_re = "|".join(_dotted_pattern(old) for old in sorted(MOVES, key=len, reverse=True))
    slashed_re = "|".join(
        rf"(?<![\w./]){re.escape(old)}(?![\w])" for old in sorted(slashed, key=len, reverse=True)
    )
    return [(re.compile(dotted_re), dotted), (re.compile(slashed_re), slashed)]


# Names that look like old modules but are not: logger channels users filter on, and the
# Parquet schema-metadata key of an operator's reported metrics (stored in runs), the demo
# builders' names in the shipped builds' build.json.
KEEP = (
    '"rldag.pools"',
    '"rldag.driver"',
    '"rldag.run_lock"',
    '"rldag.trackers"',
    "rldag.metrics:",
    'BUILDER = "operators.tiny_task',
)


def rewrite_text(text: str) -> str:
    """Every old module and file mention in `text` rewritten to the new layout."""
    for i, kept in enumerate(KEEP):
        text = text.replace(kept, f"\x00{i}\x00")
    for pattern, table in rewrites():
        text = pattern.sub(lambda m, t=table: t[m[0]], text)
    text = re.sub(
        r"\bfrom rldag import (checkpoints|registry)\b",
        lambda m: f"from rldag.{'engine' if m[1] == 'checkpoints' else 'graph'} import {m[1]}",
        text,
    )
    for i, kept in enumerate(KEEP):
        text = text.replace(f"\x00{i}\x00", kept)
    return text


def text_files(root: Path) -> list[Path]:
    """The repository's text files that may mention a module."""
    found = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if set(rel.parts) & EXCLUDE_DIRS or str(rel) in EXCLUDE_FILES or not path.is_file():
            continue
        if path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES:
            found.append(path)
    return found


def git(*args: str) -> None:
    subprocess.run(["git", *args], check=True)


def move(root: Path) -> None:
    """`git mv` every table entry; the new packages get their one-sentence `__init__`."""
    missing = [old for old in MOVES if not (root / old).exists()]
    if missing:
        sys.exit(f"move29: not on the old layout, missing: {missing}")
    for old, new in MOVES.items():
        target = root / new
        target.parent.mkdir(parents=True, exist_ok=True)
        git("mv", old, new)
    for package, sentence in PACKAGES.items():
        init = root / package / "__init__.py"
        if not init.exists():
            init.write_text(f'"""{sentence}"""\n')
            git("add", str(init.relative_to(root)))


def main(argv: list[str]) -> None:
    root = Path.cwd()
    if argv[:1] == ["--text-only"]:
        files = [Path(a) for a in argv[1:]]
    else:
        move(root)
        files = text_files(root)
    for path in files:
        text = path.read_text(encoding="utf-8")
        new = rewrite_text(text)
        if new != text:
            path.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
