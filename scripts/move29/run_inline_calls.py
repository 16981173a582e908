"""Issue 29 §4.1/§4.3/§4.4, the tests' side: `X.run_inline(...)` (a method of Run until then)
becomes `run_inline(X, ...)` from rldag.engine.driver, the pid of a pool worker is read
with `.pid.remote()` (PoolWorker.info is gone), and NodeRunner and WeightsSnapshot are
imported from rldag.compute.runner.

Finds the call sites by content, not by path, so it runs the same before or after the tests
move: ``python scripts/move29/run_inline_calls.py [ROOT ...]`` (default: tests). A file that
defines its own `run_inline` helper calls `driver.run_inline`; the shared helpers
(runs.py, hostile.py, learning_runs.py) store the reward curve, as every inline run did
before.
Then ruff sorts the imports of the files it changed.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

CALL = ".run_inline("
HELPERS = {"runs.py", "hostile.py", "learning_runs.py"}  # inline-run helpers: keep the reward curve
CURVE = "from rldag.report.reward_curve import store_reward_curve"
PID = ('.info.remote())["pid"]', ".pid.remote())")
MOVED_NAMES = {  # (module, name) -> the module that has it now
    ("rldag.compute.in_process", "NodeRunner"): "rldag.compute.runner",
    ("rldag.compute.in_process", "WeightsSnapshot"): "rldag.compute.runner",
}
IMPORT = re.compile(r"^( *)from ([\w.]+) import ([\w, ]+)$", re.M)


def _moved_names(match: re.Match) -> str:
    """One `from module import names` line as one line per module that has them now."""
    indent, module, names = match[1], match[2], [n.strip() for n in match[3].split(",")]
    by_module: dict[str, list[str]] = {}
    for name in names:
        by_module.setdefault(MOVED_NAMES.get((module, name), module), []).append(name)
    lines = [f"{indent}from {m} import {', '.join(ns)}" for m, ns in by_module.items()]
    return "\n".join(lines)


def _receiver_start(text: str, end: int) -> int:
    """Where the expression ending at `end` (before `.run_inline(`) starts: names, dots and
    balanced brackets, e.g. ``Run.start(loaded, build_graph(loaded))``."""
    i, depth = end, 0
    while i > 0:
        c = text[i - 1]
        if c in ")]":
            depth += 1
        elif c in "([":
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and not (c.isalnum() or c in "_."):
            break
        i -= 1
    return i


def _closing(text: str, start: int) -> int:
    """The index of the bracket closing the one opened just before `start`."""
    depth = 1
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    raise ValueError("unbalanced call")


def rewrite_calls(text: str, name: str, extra: str) -> tuple[str, int]:
    """Every `X.run_inline(args)` as `name(X, args[, extra])`; the text and the count."""
    count, pos = 0, 0
    while (at := text.find(CALL, pos)) >= 0:
        start = _receiver_start(text, at)
        receiver = text[start:at]
        args_start = at + len(CALL)
        close = _closing(text, args_start)
        args = [a for a in (text[args_start:close].strip(), extra) if a]
        call = f"{name}({', '.join([receiver, *args])})"
        text = f"{text[:start]}{call}{text[close + 1 :]}"
        pos = start + len(call)
        count += 1
    return text, count


def add_imports(text: str, lines: list[str]) -> str:
    """`lines` after the module's last top-level import (ruff sorts them afterwards)."""
    body = ast.parse(text).body
    ends = [n.end_lineno or 0 for n in body if isinstance(n, ast.Import | ast.ImportFrom)]
    at = max(ends, default=0)
    src = text.splitlines(keepends=True)
    return "".join(src[:at] + [f"{line}\n" for line in lines] + src[at:])


def rewrite(path: Path) -> bool:
    text = path.read_text()
    new = IMPORT.sub(_moved_names, text.replace(*PID))
    if CALL in new:
        own = re.search(r"^def run_inline\(", new, re.M) is not None
        name = "driver.run_inline" if own else "run_inline"
        helper = path.name in HELPERS
        new, _ = rewrite_calls(new, name, "on_close=(store_reward_curve,)" if helper else "")
        own_import = "from rldag.engine import driver"
        imports = [own_import if own else "from rldag.engine.driver import run_inline"]
        new = add_imports(new, imports + ([CURVE] if helper else []))
    if new == text:
        return False
    path.write_text(new)
    return True


def main(roots: list[str]) -> int:
    changed = [str(p) for root in roots for p in sorted(Path(root).rglob("*.py")) if rewrite(p)]
    if changed:
        ruff = Path(sys.executable).with_name("ruff")
        subprocess.run([str(ruff), "check", "--fix", "-q", "--select", "I", *changed], check=False)
        subprocess.run([str(ruff), "format", "-q", *changed], check=True)
    print("\n".join(changed))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["tests"]))
