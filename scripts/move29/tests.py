"""Issue 29's move of the tests into a tree that mirrors the code: `git mv` per the path table
below, helpers out of conftest.py and test files into `tests/support/`, then every mention of
an old test module (`tests.user_code:echo_score`, `from tests.conftest import ...`) or file
(`tests/test_spec.py`) in the repository rewritten to the new one.

Run from the repository root on a clean tree at the old tests layout (after
``scripts/move29/code.py``, or before it: only `tests` names and test files are touched)::

    python scripts/move29/tests.py

It fails (exit 1, naming the files) if a source in the table is missing or a file under
`tests/` is in no table, so a test added since is noticed: add it to TABLE and run it again
on a clean tree. Ruff (`python -m ruff`) then sorts the imports and drops those a cut left
unused, in the files this script changed.
"""

# ruff: noqa: E501  (EDITS quotes lines of the tree as they are, some past 100 columns)

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

# The new folders and the sentence of each one's __init__.py.
FOLDERS = {
    "tests": "The project's tests, in folders that mirror the code; helpers in tests/support.",
    "tests/core": "Tests of the core (rldag/), one folder per concern.",
    "tests/core/config": "pipeline.yaml to a validated spec: keys, overrides, model paths, pools.",
    "tests/core/graph": "The DAG, the operator contract, the registry.",
    "tests/core/engine": "The loop: the scheduler, a run's steps and stops, metrics.",
    "tests/core/storage": "Run storage (file and S3) and the run lock.",
    "tests/core/compute": "Where operators run: pools, placement, dispatch, workers' logs.",
    "tests/core/compute/weights": "The weights edge: the wire format, broadcasts, edges.",
    "tests/core/planning": "The cost model, the simulator, `plan --auto`.",
    "tests/core/report": "Reports besides the tables: sample rollouts, trackers.",
    "tests/core/console": "Terminal output: progress, trajectories, `rldag inspect`.",
    "tests/operators": "Tests of the operators, one folder per node kind.",
    "tests/operators/source": "Source nodes: datasets, their cursor and their checks.",
    "tests/operators/generate": "Generate nodes: prompts, templates, single-turn sampling.",
    "tests/operators/generate/agent": "The multi-turn agent loop: environments, tools, parsers.",
    "tests/operators/sandbox": "The code sandbox: its API, attacks on the host, the node.",
    "tests/operators/score": "Score nodes: reward functions and workers, judges, reward models.",
    "tests/operators/transform": "Transform nodes: advantages, composed rewards, DAPO.",
    "tests/operators/train": "Train nodes: the trainer, critics, LoRA, the speed paths.",
    "tests/operators/algorithms": "The RL math by name: estimators, losses, KL, GAE.",
    "tests/operators/rollout": "The rollout engine: batching, prefix reuse, servers, updates.",
    "tests/flows": "The launcher: the `rldag` command, deployments, the Prefect server.",
    "tests/e2e": "Whole runs end to end; everything here is marked slow (tests/conftest.py).",
    "tests/examples": "The example pipelines and the tiny demo tasks they run on.",
    "tests/docs": "The README and docs show the files they document as they are.",
    "tests/support": "Helpers the tests import: user code, pipelines, servers, models, data.",
    "tests/support/data": "Data files the tests read.",
}

# Old path (from the repository root) -> new folder. Every file under tests/ is here, but for
# KEEP_FLAT.
PLACES = {
    "core/config": [
        "test_spec.py",
        "test_byo_model_paths.py",
        "test_byo_pools_overrides.py",
    ],
    "core/graph": ["test_graph.py", "test_operator_registry.py"],
    "core/engine": [
        "test_scheduler.py",
        "test_run_persistence.py",
        "test_run_stops.py",
        "test_agent_metrics.py",
    ],
    "core/storage": ["test_storage.py", "test_run_lock.py", "test_s3_storage.py"],
    "core/compute": [
        "test_dispatch.py",
        "test_placement.py",
        "test_agent_placement.py",
        "test_named_pools.py",
        "test_log_capture.py",
        "test_allocator.py",
    ],
    "core/compute/weights": ["test_weights.py", "test_weight_broadcast.py", "test_weight_edges.py"],
    "core/planning": ["test_costs.py", "test_simulator.py", "test_auto_plan.py"],
    "core/report": ["test_report.py", "test_trackers.py"],
    "core/console": [
        "test_progress.py",
        "test_trajectory_view.py",
        "test_inspect.py",
        "test_inspect_exits.py",
        "test_startup_progress.py",
    ],
    "operators/source": [
        "test_data_cursor.py",
        "test_hf_dataset.py",
        "test_hostile_datasets.py",
        "test_byo_dataset.py",
    ],
    "operators/generate": ["test_prompt_checks.py", "test_byo_templates.py"],
    "operators/generate/agent": [
        "test_agent_deadline.py",
        "test_agent_hosting.py",
        "test_agent_loop.py",
        "test_agent_render.py",
        "test_agent_tools.py",
        "test_guessing_game.py",
        "test_gym_env.py",
        "test_template_check.py",
        "test_tool_parsers.py",
    ],
    "operators/rollout": [
        "test_torch_engine.py",
        "test_rollout_batching.py",
        "test_prefix_reuse.py",
        "test_rollout_server.py",
        "test_rollout_guard.py",
        "test_inflight_updates.py",
    ],
    "operators/sandbox": [
        "sandbox/__init__.py",
        "sandbox/conftest.py",
        "sandbox/test_sandbox_api.py",
        "sandbox/test_forgery.py",
        "sandbox/test_uids.py",
        "sandbox/test_attacks_proc.py",
        "sandbox/test_attacks_io.py",
        "sandbox/test_sandbox_node.py",
    ],
    "operators/score": [
        "test_reward_worker.py",
        "test_reward_failures.py",
        "test_remote_verifier.py",
        "test_llm_judge.py",
        "test_reward_model.py",
        "test_byo_user_code.py",
    ],
    "operators/transform": ["test_advantage_op.py", "test_dapo.py", "test_combine.py"],
    "operators/train": [
        "test_tis_trainer.py",
        "test_train_speed_paths.py",
        "test_lora.py",
        "test_critic.py",
        "test_critic_fsdp.py",
    ],
    "operators/algorithms": [
        "test_estimators.py",
        "test_gae.py",
        "test_kl_estimators.py",
        "test_policy_losses.py",
        "test_rl_math.py",
        "test_token_advantages.py",
        "test_algorithm_registry.py",
    ],
    "flows": [
        "test_cli.py",
        "test_deploy_cli.py",
        "test_api_outage.py",
        "test_progress_artifact.py",
        "test_embedded_server.py",
    ],
    "e2e": [
        "test_agent_env_learning.py",
        "test_agent_learning.py",
        "test_agent_pipeline.py",
        "test_algorithm_pipelines.py",
        "test_async.py",
        "test_chat_prompts.py",
        "test_code_example.py",
        "test_driver_memory.py",
        "test_fsdp.py",
        "test_learning.py",
        "test_lora_learning.py",
        "test_multinode.py",
        "test_pipeline_run.py",
        "test_ppo_gae.py",
        "test_prefect_server.py",
        "test_ray_pools.py",
        "test_resume.py",
        "test_reward_failures_e2e.py",
        "test_rollout_service.py",
        "test_service_faults.py",
        "test_trainer_options.py",
        "test_weight_transport.py",
        "test_worker_faults.py",
    ],
    "examples": [
        "test_tiny_task.py",
        "test_tiny_agent_task.py",
        "test_tiny_code_task.py",
        "test_shipped_models.py",
        "test_from_verl_example.py",
        "test_reward_service_examples.py",
        "test_byo_example.py",
    ],
    "docs": ["test_readme.py"],
    "support": [
        "agent_envs.py",
        "algorithm_user_code.py",
        "byo.py",
        "chromium.py",
        "gloo_ranks.py",
        "hostile.py",
        "learning_runs.py",
        "prefect_server.py",
        "sim_graphs.py",
        "tiny_models.py",
        "tolerances.py",
        "tracker_servers.py",
        "user_code.py",
    ],
    "support/data": ["data/sync_reference.yaml"],
}
KEEP_FLAT = {"tests/__init__.py", "tests/conftest.py", "tests/durations.json"}
TABLE = {
    f"tests/{old}": f"tests/{folder}/{Path(old).name}"
    for folder, olds in PLACES.items()
    for old in olds
}

# Importable helpers cut out of a conftest or a test file (by their top-level definition, the
# comment lines right above it included) into a support module: (old file, names, new module).
# A new module gets every import of the files it is cut from; ruff drops those left unused.
# Where the module exists already (agent_envs.py) the code is appended and needs no import.
EXTRACTS = [
    ("tests/conftest.py", ["scoring_pipeline", "grpo_nodes"], "tests/support/pipelines.py"),
    ("tests/test_s3_storage.py", ["CREDENTIALS", "endpoint"], "tests/support/s3.py"),
    ("tests/test_train_speed_paths.py", ["grpo_table"], "tests/support/train_tables.py"),
    ("tests/test_pipeline_run.py", ["small_grpo"], "tests/support/small_pipelines.py"),
    (
        "tests/sandbox/conftest.py",
        [
            "LIMITS",
            "marker",
            "processes_with",
            "slot_processes",
            "assert_only_zygotes_left",
            "Listener",
            "host_ip",
        ],
        "tests/support/sandbox.py",
    ),
    ("tests/test_code_example.py", ["SANDBOX_COLUMNS"], "tests/support/sandbox.py"),
    ("tests/test_gym_env.py", ["as_question"], "tests/support/agent_envs.py"),
]
NEW_MODULES = {
    "tests/support/paths.py": "The repository's root, for tests that read its files or run in it.",
    "tests/support/pipelines.py": (
        "Small pipelines the tests write: a model-free scoring pipeline and the five GRPO nodes."
    ),
    "tests/support/s3.py": (
        "A real local S3-protocol server (moto's server mode, on loopback) and its credentials."
    ),
    "tests/support/train_tables.py": "Random GRPO training tables for the trainer's tests.",
    "tests/support/small_pipelines.py": "Overrides for short runs of the default pipeline.",
    "tests/support/sandbox.py": (
        "The sandbox tests' limits and host-side probes (canary servers and processes, /proc "
        "scans) used to check an attack had no effect; the sandbox node's columns."
    ),
}
PATHS_MODULE = """{doc}
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""

# Module-level marks dropped from files moved to tests/e2e, slow by folder now.
SLOW_MARK = "pytestmark = pytest.mark.slow\n"

# tests/conftest.py: the slow mark by folder, and durations keyed by file name.
CONFTEST_EDITS = [
    (
        """def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], 0.0))  # stable
""",
        """E2E = Path(__file__).parent / "e2e"  # whole runs end to end: all slow


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(E2E):
            item.add_marker(pytest.mark.slow)
    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    items.sort(key=lambda item: -seconds.get(item.path.name, 0.0))  # stable
""",
    ),
    (
        """        path = report.nodeid.split("::")[0]
        self.totals[path] = self.totals.get(path, 0.0) + report.duration
""",
        """        name = Path(report.nodeid.split("::")[0]).name  # file names are unique
        self.totals[name] = self.totals.get(name, 0.0) + report.duration
""",
    ),
    (
        'DURATIONS = Path(__file__).with_name("durations.json")\n',
        'DURATIONS = Path(__file__).with_name("durations.json")  # keyed by file name\n',
    ),
]

# Exact edits after the rewrites, at the new paths: lines the longer names push past 100
# columns (in `fmt: skip` calls or docstrings) and a docstring whose helpers moved out.
EDITS = [
    (
        "tests/operators/generate/agent/test_agent_loop.py",
        """    table = run(chat_model, stops, tools=["tests.support.agent_envs:slow_tool"],
                tool_parser="tests.support.agent_envs:call_slow", episode_timeout_s=0.5)  # fmt: skip
""",
        """    table = run(chat_model, stops, tools=["tests.support.agent_envs:slow_tool"],
                tool_parser="tests.support.agent_envs:call_slow",
                episode_timeout_s=0.5)  # fmt: skip
""",
    ),
    (
        "tests/operators/generate/agent/test_agent_loop.py",
        """                    tools=["tests.support.agent_envs:slow_tool"], tool_parser="tests.support.agent_envs:call_quick",
""",
        """                    tools=["tests.support.agent_envs:slow_tool"],
                    tool_parser="tests.support.agent_envs:call_quick",
""",
    ),
    (
        "tests/operators/generate/agent/test_agent_loop.py",
        """    table = run(chat_model, stops, tools=["python"], tool_parser="tests.support.agent_envs:call_python",
""",
        """    table = run(chat_model, stops, tools=["python"],
                tool_parser="tests.support.agent_envs:call_python",
""",
    ),
    (
        "bench/prefect_server_overhead.py",
        '''    """A model-free pipeline: source -> answer -> score -> advantage (tests/support/user_code.py)."""
''',
        '''    """A model-free pipeline: source -> answer -> score -> advantage (user code:
    tests/support/user_code.py)."""
''',
    ),
    (
        "tests/operators/sandbox/conftest.py",
        '''"""Fixtures for the sandbox tests: a shared sandbox with small limits, and host-side probes
(canary servers and processes, /proc scans) used to check an attack had no effect."""
''',
        '''"""Fixtures for the sandbox tests: a shared sandbox with small limits, a one-slot sandbox and
a canary process (the host-side probes are in tests/support/sandbox.py)."""
''',
    ),
]

EXCLUDE_DIRS = {".git", ".venv", ".cache", "__pycache__", "tiny_models", "rldag.egg-info", "site"}
EXCLUDE_FILES = {
    "docs/dev/floor-plan-issue-29.md",
    "scripts/move29/code.py",
    "scripts/move29/tests.py",
    "tests/durations.json",
}
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".sh", ".txt", ".json"}
TEXT_NAMES = {"Makefile", "run"}


def docstring(sentence: str) -> str:
    """A module docstring of `sentence`, wrapped at 100 columns."""
    return textwrap.fill(f'"""{sentence}"""', width=100) + "\n"


def fail(message: str) -> None:
    sys.exit(f"move29/tests: {message}")


def module(path: str) -> str:
    """`tests/sandbox/conftest.py` -> `tests.sandbox.conftest`."""
    return path.removesuffix(".py").replace("/", ".")


def git(*args: str) -> None:
    subprocess.run(["git", *args], check=True)


# -- the checks before anything changes --------------------------------------------------------


def placed(root: Path) -> list[str]:
    """Files already in a new folder (written for the new layout): not moved, but rewritten."""
    tracked = subprocess.run(
        ["git", "ls-files", "tests"], check=True, capture_output=True, text=True, cwd=root
    ).stdout.split()
    folders = [f + "/" for f in FOLDERS if f != "tests"]
    return [f for f in tracked if f not in TABLE and f.startswith(tuple(folders))]


def check(root: Path) -> None:
    missing = sorted(old for old in TABLE if not (root / old).is_file())
    if missing:
        fail(f"not on the old tests layout; missing: {missing}")
    tracked = subprocess.run(
        ["git", "ls-files", "tests"], check=True, capture_output=True, text=True
    ).stdout.split()
    unlisted = sorted(set(tracked) - set(TABLE) - KEEP_FLAT - set(placed(root)))
    untracked = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard", "tests"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    if unlisted or untracked:
        fail(f"files under tests/ in no table (add them to PLACES): {unlisted + untracked}")
    news = [*TABLE.values(), *placed(root)]
    names = [Path(new).name for new in news if Path(new).name.startswith("test_")]
    doubles = sorted({n for n in names if names.count(n) > 1})
    if doubles:
        fail(f"test file names must stay unique (tests/durations.json is keyed by them): {doubles}")


# -- cutting helpers out ------------------------------------------------------------------------


def _span(lines: list[str], node: ast.stmt) -> tuple[int, int]:
    """0-based [start, end) of a top-level statement with its decorators and the comment lines
    right above it."""
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
    while start > 0 and lines[start - 1].startswith("#"):
        start -= 1
    return start, node.end_lineno


def _top_level_names(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _is_fixture(node: ast.stmt) -> bool:
    return any("fixture" in ast.unparse(d) for d in getattr(node, "decorator_list", []))


def cut(path: Path, names: list[str]) -> tuple[list[str], list[str], set[str]]:
    """Remove the definitions of `names` from `path`: their code blocks, the file's imports
    (text), and which of them are fixtures."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    found, spans, fixtures = {}, [], set()
    for node in tree.body:
        for name in _top_level_names(node):
            if name in names:
                found[name] = node
    absent = [n for n in names if n not in found]
    if absent:
        fail(f"{path}: no top-level definition of {absent}")
    for name in names:
        spans.append(_span(lines, found[name]))
        if _is_fixture(found[name]):
            fixtures.add(name)
    imports = [
        "".join(lines[n.lineno - 1 : n.end_lineno])
        for n in tree.body
        if isinstance(n, ast.Import | ast.ImportFrom) and getattr(n, "module", None) != "__future__"
    ]
    blocks = ["".join(lines[a:b]) for a, b in spans]
    for a, b in sorted(spans, reverse=True):
        end = b
        while end < len(lines) and not lines[end].strip():
            end += 1  # the blank lines after the block go with it
        del lines[a:end]
    rest = "".join(lines)
    path.write_text(rest, encoding="utf-8")
    return blocks, imports, fixtures


def _add_import(path: Path, line: str) -> None:
    """Insert `line` after the file's last top-level import (ruff sorts it later)."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    last = max(
        n.end_lineno for n in ast.parse(text).body if isinstance(n, ast.Import | ast.ImportFrom)
    )
    lines.insert(last, line + "\n")
    path.write_text("".join(lines), encoding="utf-8")


def _fixture_import(conftest: Path, line: str) -> None:
    """Make a fixture available to a folder through its conftest.py."""
    line += "  # noqa: F401  (a fixture)\n"
    if conftest.exists():
        _add_import(conftest, line.rstrip("\n"))
        return
    conftest.write_text(
        '"""Fixtures for the tests in this folder."""\n\nfrom __future__ import annotations\n\n'
        + line,
        encoding="utf-8",
    )
    git("add", str(conftest))


def extract(root: Path) -> dict[tuple[str, str], str]:
    """Cut every EXTRACTS entry into its support module; returns (old module, name) -> new
    module, for the rewrites of the imports and `module:attr` paths that name them."""
    moved: dict[tuple[str, str], str] = {}
    gathered: dict[str, tuple[list[str], list[str]]] = {}
    for old, names, dest in EXTRACTS:
        at = root / TABLE.get(old, old)
        blocks, imports, fixtures = cut(at, names)
        gathered.setdefault(dest, ([], []))
        gathered[dest][0].extend(blocks)
        gathered[dest][1].extend(imports)
        rest = at.read_text(encoding="utf-8")
        used = [n for n in names if re.search(rf"\b{n}\b", rest)]
        new = module(dest)
        for name in used:
            if name in fixtures:  # through the folder's conftest: no import beside its users
                _fixture_import(at.parent / "conftest.py", f"from {new} import {name}")
            else:
                _add_import(at, f"from {new} import {name}")
        for name in names:
            moved[(module(old), name)] = new
    for dest, (blocks, imports) in gathered.items():
        path = root / dest
        if path.exists():
            text = path.read_text(encoding="utf-8").rstrip("\n")
            path.write_text(text + "\n\n\n" + "\n\n".join(blocks), encoding="utf-8")
            continue
        head = docstring(NEW_MODULES[dest]) + "\nfrom __future__ import annotations\n\n"
        body = "".join(dict.fromkeys(imports)) + "\n\n" + "\n\n".join(blocks)
        path.write_text(head + body, encoding="utf-8")
        git("add", dest)
    return moved


# -- moving --------------------------------------------------------------------------------------


def move(root: Path) -> None:
    for folder in FOLDERS:
        (root / folder).mkdir(parents=True, exist_ok=True)
    for old, new in TABLE.items():
        git("mv", old, new)
    for folder, sentence in FOLDERS.items():
        init = root / folder / "__init__.py"
        init.write_text(docstring(sentence), encoding="utf-8")
        git("add", str(init.relative_to(root)))
    for leftover in ("tests/sandbox", "tests/data"):
        if (root / leftover).is_dir() and not any((root / leftover).iterdir()):
            (root / leftover).rmdir()
    paths = root / "tests/support/paths.py"
    paths.write_text(
        PATHS_MODULE.format(doc=docstring(NEW_MODULES["tests/support/paths.py"])), "utf-8"
    )
    git("add", "tests/support/paths.py")


def durations(root: Path) -> None:
    """tests/durations.json keyed by file name (tests/conftest.py looks them up so)."""
    path = root / "tests/durations.json"
    seconds = json.loads(path.read_text())
    path.write_text(
        json.dumps({Path(k).name: v for k, v in seconds.items()}, indent=1) + "\n", "utf-8"
    )


def conftest(root: Path) -> None:
    path = root / "tests/conftest.py"
    text = path.read_text(encoding="utf-8")
    for old, new in CONFTEST_EDITS:
        if old not in text:
            fail(f"tests/conftest.py: expected text not found:\n{old}")
        text = text.replace(old, new)
    path.write_text(text, encoding="utf-8")


def unmark_e2e(root: Path) -> None:
    for new in TABLE.values():
        if new.startswith("tests/e2e/"):
            path = root / new
            text = path.read_text(encoding="utf-8")
            if SLOW_MARK not in text:
                fail(f"{new}: no module-level `{SLOW_MARK.strip()}` (slow by folder now)")
            path.write_text(text.replace(SLOW_MARK, "", 1), encoding="utf-8")


# -- the repository root ------------------------------------------------------------------------

ROOT_EXPR = re.compile(r"Path\(__file__\)\.resolve\(\)\.parents\[(\d)\]")
ROOT_ALIAS = re.compile(r"^([A-Z_]+) = ROOT\n", re.M)


def use_root(root: Path, already: list[str]) -> None:
    """`Path(__file__).resolve().parents[n]` (the repository root, from the old place) ->
    ROOT from tests/support/paths.py."""
    stay = ["tests/conftest.py", *already]
    for old, new in [*TABLE.items(), *zip(stay, stay, strict=True)]:
        path = root / new
        if path.suffix != ".py":
            continue
        text = path.read_text(encoding="utf-8")
        depth = len(Path(old).parts) - 1
        for m in ROOT_EXPR.finditer(text):
            if int(m[1]) != depth:
                fail(f"{new}: {m[0]} is not the repository root from {old}")
        if not ROOT_EXPR.search(text):
            continue
        text = ROOT_EXPR.sub("ROOT", text)
        for alias in ROOT_ALIAS.findall(text):
            text = text.replace(f"{alias} = ROOT\n", "", 1)
            if alias != "ROOT":
                text = re.sub(rf"\b{alias}\b", "ROOT", text)
        path.write_text(text, encoding="utf-8")
        _add_import(path, "from tests.support.paths import ROOT")


# -- rewriting mentions ----------------------------------------------------------------------------

FROM_IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)from (?P<mod>tests(?:\.\w+)*) import "
    r"(?:\((?P<paren>[^)]*)\)|(?P<flat>[^\n#]*?))(?P<comment>[ \t]*#[^\n]*)?$",
    re.M,
)


DATA_PATH = re.compile(r'"tests" / "data" / "([\w.]+)"')


def rewrites(moved: dict[tuple[str, str], str]):
    modules = {module(old): module(new) for old, new in TABLE.items() if old.endswith(".py")}
    modules["tests.sandbox"] = "tests.operators.sandbox"
    slashed = dict(TABLE)
    slashed["tests/sandbox/"] = "tests/operators/sandbox/"
    slashed["tests/sandbox"] = "tests/operators/sandbox"
    slashed["tests/data/"] = "tests/support/data/"

    def target(mod: str, name: str) -> str:
        """The module that `name` of old module `mod` lives in now."""
        if name == "ROOT":
            return "tests.support.paths"
        if (mod, name) in moved:
            return moved[(mod, name)]
        if mod == "tests" and f"tests.{name}" in modules:
            return "tests"  # `from tests import learning_runs`, fixed below
        return modules.get(mod, mod)

    def from_import(m: re.Match[str]) -> str:
        mod = m["mod"]
        if mod != "tests" and mod not in modules and not any(k[0] == mod for k in moved):
            return m[0]
        raw = m["paren"] if m["paren"] is not None else m["flat"]
        names = [n.strip() for n in raw.replace("\n", " ").split(",") if n.strip()]
        groups: dict[str, list[str]] = {}
        for entry in names:
            name = entry.split(" as ")[0].strip()
            new = target(mod, name)
            if new == "tests":
                parent, leaf = modules[f"tests.{name}"].rsplit(".", 1)
                groups.setdefault(parent, []).append(leaf if leaf == name else f"{leaf} as {name}")
                continue
            groups.setdefault(new, []).append(entry)
        comment = m["comment"] or ""
        return "\n".join(
            f"{m['indent']}from {new} import {', '.join(entries)}{comment}"
            for new, entries in groups.items()
        )

    attr = re.compile(
        r"(?<![\w.])(" + "|".join(re.escape(f"{mod}:{name}") for mod, name in moved) + r")(?!\w)"
    )
    attrs = {f"{mod}:{name}": f"{new}:{name}" for (mod, name), new in moved.items()}
    dotted = re.compile(
        r"(?<![\w.])("
        + "|".join(re.escape(k) for k in sorted(modules, key=len, reverse=True))
        + r")(?![\w])"
    )
    slash = re.compile(
        r"(?<![\w./])("
        + "|".join(re.escape(k) for k in sorted(slashed, key=len, reverse=True))
        + r")(?![\w])"
    )

    def rewrite(text: str) -> str:
        text = FROM_IMPORT.sub(from_import, text)
        text = attr.sub(lambda m: attrs[m[1]], text)
        text = dotted.sub(lambda m: modules[m[1]], text)
        text = slash.sub(lambda m: slashed[m[1]], text)
        return DATA_PATH.sub(r'"tests/support/data/\1"', text)

    return rewrite


def text_files(root: Path) -> list[Path]:
    found = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if set(rel.parts) & EXCLUDE_DIRS or str(rel) in EXCLUDE_FILES or not path.is_file():
            continue
        if path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES:
            found.append(path)
    return found


def ruff(root: Path, files: list[Path]) -> None:
    """Sort the imports and drop those left unused, then format, in the changed files."""
    names = [str(f.relative_to(root)) for f in files if f.suffix == ".py"]
    if not names:
        return
    cmd = [sys.executable, "-m", "ruff"]
    subprocess.run([*cmd, "check", "-q", "--fix", "--select", "I001,F401", *names], check=False)
    subprocess.run([*cmd, "format", "-q", *names], check=True)


def main() -> None:
    root = Path.cwd()
    check(root)
    already = placed(root)
    before = {p: p.read_text(encoding="utf-8") for p in text_files(root)}
    move(root)
    moved = extract(root)
    conftest(root)
    unmark_e2e(root)
    use_root(root, already)
    durations(root)
    rewrite = rewrites(moved)
    changed = []
    for path in text_files(root):
        text = path.read_text(encoding="utf-8")
        new = rewrite(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
        old = before.get(path)
        if new != old:
            changed.append(path)
    for rel, old, new in EDITS:
        path = root / rel
        text = path.read_text(encoding="utf-8")
        if old not in text:
            fail(f"{rel}: expected text not found:\n{old}")
        path.write_text(text.replace(old, new, 1), encoding="utf-8")
    ruff(root, changed + [root / new for new in [*TABLE.values(), *already]])
    git("add", "-A", "tests")
    print(f"move29/tests: moved {len(TABLE)} files, rewrote {len(changed)}")


if __name__ == "__main__":
    main()
