"""Judging on the host: expected values never enter the sandbox.

Assert-style tests are split with `ast` into a host-side *check* and sandbox-side *probes*.
In `assert f(2) == [1, 2]` the literal `[1, 2]` stays on the host; only `f(2)` is sent in, and
its value comes back as tagged plain data (harness.encode) that is decoded here into builtin
types and compared here. So an always-equal object cannot pass (it cannot be encoded), an
early `os._exit(0)` leaves probes unreported (failed), and printed or forged reports can only
claim values - without the expected ones, which were never inside. Comparisons, `not`,
`and`/`or` and a few pure builtins (`sorted`, `set`, `len`, `abs`, `round`, `math.isclose`,
...) are evaluated on the host; anything else becomes a probe. Statements that are not
top-level asserts run inside as setup; a non-assert statement that contains asserts (a loop)
is an *exec* test: it passes when it raises nothing (this kind can be forged by a program that
hijacks the harness, as can a comparison whose both sides need the program).
"""

from __future__ import annotations

import ast
import functools
import json
import math
from dataclasses import dataclass
from typing import Any

HOST_FUNCS: dict[str, Any] = {
    f.__name__: f
    for f in (abs, bool, dict, float, frozenset, int, len, list, max, min, round, set, sorted)
    + (str, sum, tuple, complex)
}
HOST_FUNCS["math.isclose"] = math.isclose
_OPS = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
}
_FAILED = object()  # a probe that raised or was never reported


@dataclass(frozen=True)
class CompiledTests:
    """Assert tests split into what runs inside (setup, probes) and host-side checks."""

    setup: str
    probes: tuple[tuple[str, str], ...]  # (eval | exec, source)
    checks: tuple[tuple, ...]  # one judge tree per test

    @property
    def total(self) -> int:
        return len(self.checks)


class _Compiler:
    def __init__(self, entry_point: str | None) -> None:
        self.entry_point = entry_point
        self.probes: list[tuple[str, str]] = []
        self.setup: list[str] = []
        self.checks: list[tuple] = []

    def probe(self, kind: str, node: ast.AST) -> tuple:
        self.probes.append((kind, ast.unparse(node)))
        return ("probe", len(self.probes) - 1)

    def expr(self, node: ast.expr) -> tuple:
        try:
            return ("lit", _host_value(node))
        except (ValueError, TypeError, SyntaxError, ArithmeticError, RecursionError):
            pass
        if isinstance(node, ast.Compare):
            operands = [self.expr(node.left)] + [self.expr(c) for c in node.comparators]
            return ("cmp", [type(op) for op in node.ops], operands)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return ("not", self.expr(node.operand))
        if isinstance(node, ast.BoolOp):
            return (
                "and" if isinstance(node.op, ast.And) else "or",
                [self.expr(v) for v in node.values],
            )
        name = _call_name(node)
        if name in HOST_FUNCS and not any(isinstance(a, ast.Starred) for a in node.args):
            if all(k.arg is not None for k in node.keywords):
                args = [self.expr(a) for a in node.args]
                kwargs = {k.arg: self.expr(k.value) for k in node.keywords}
                return ("call", name, args, kwargs)
        return self.probe("eval", node)

    def statement(self, stmt: ast.stmt, top: bool) -> None:
        if isinstance(stmt, ast.Assert):
            self.checks.append(self.expr(stmt.test))
        elif self.entry_point and top and _is_check(stmt):
            for inner in stmt.body:
                self.statement(_Rename("candidate", self.entry_point).visit(inner), False)
        elif any(isinstance(n, ast.Assert) for n in ast.walk(stmt)):
            self.checks.append(("ran", self.probe("exec", stmt)[1]))
        elif top:
            self.setup.append(ast.unparse(stmt))
        else:
            self.probes.append(("exec", ast.unparse(stmt)))  # helper statement inside check()


@functools.lru_cache(maxsize=4096)
def compile_tests(source: str, entry_point: str | None = None) -> CompiledTests:
    """Split assert-style test code; raises SyntaxError for unparsable tests."""
    tree = ast.parse(source)
    comp = _Compiler(entry_point)
    for stmt in tree.body:
        comp.statement(stmt, True)
    return CompiledTests("\n".join(comp.setup), tuple(comp.probes), tuple(comp.checks))


def judge(tests: CompiledTests, results: bytes) -> int:
    """Number of tests passed, given the sandbox's probe report (fd 3 lines)."""
    values = decode_results(results, len(tests.probes))
    passed = 0
    for check in tests.checks:
        try:
            if _truthy(_eval(check, values)):
                passed += 1
        except Exception:  # noqa: BLE001 - any evaluation error is a failed test
            continue
    return passed


def decode_results(results: bytes, n: int) -> list[Any]:
    """Probe values by index; _FAILED for probes that raised, were garbled or never reported."""
    values: list[Any] = [_FAILED] * n
    seen: set[int] = set()
    for line in results.decode("utf-8", "replace").splitlines():
        parts = line.split("\t", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        i = int(parts[0])
        if i >= n or i in seen:
            continue
        seen.add(i)
        if parts[1] == "ok":
            try:
                values[i] = decode(json.loads(parts[2]))
            except (ValueError, TypeError, KeyError, RecursionError):
                pass
    return values


def decode(obj: Any, depth: int = 0) -> Any:
    """Tagged JSON (harness.encode) -> builtin values. Raises ValueError on anything else."""
    if depth > 100:
        raise ValueError("too deep")
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if type(obj) is not dict or len(obj) != 1:
        raise ValueError("not a tagged value")
    ((tag, body),) = obj.items()
    d = depth + 1
    if tag in ("l", "t", "s", "fs"):
        if type(body) is not list:
            raise ValueError("bad container")
        items = [decode(v, d) for v in body]
        return {"l": list, "t": tuple, "s": set, "fs": frozenset}[tag](items)
    if tag == "d" and type(body) is list:
        return {decode(k, d): decode(v, d) for k, v in body}
    if tag in ("b", "ba") and type(body) is str:
        return (bytes if tag == "b" else bytearray).fromhex(body)
    if tag == "c" and type(body) is list and len(body) == 2:
        return complex(float(body[0]), float(body[1]))
    raise ValueError(f"unknown tag {tag!r}")


def _eval(node: tuple, values: list[Any]) -> Any:
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "probe":
        value = values[node[1]]
        if value is _FAILED:
            raise LookupError("probe failed")
        return value
    if kind == "ran":
        return values[node[1]] is not _FAILED
    if kind == "not":
        return not _truthy(_eval(node[1], values))
    if kind == "and":
        return all(_truthy(_eval(v, values)) for v in node[1])
    if kind == "or":
        return any(_truthy(_eval(v, values)) for v in node[1])
    if kind == "cmp":
        ops, operands = node[1], node[2]
        left = _eval(operands[0], values)
        for op, right_node in zip(ops, operands[1:], strict=True):
            right = _eval(right_node, values)
            if not _truthy(_OPS[op](left, right)):
                return False
            left = right
        return True
    if kind == "call":
        args = [_eval(a, values) for a in node[2]]
        kwargs = {k: _eval(v, values) for k, v in node[3].items()}
        return HOST_FUNCS[node[1]](*args, **kwargs)
    raise ValueError(f"bad judge node {kind!r}")


_PLAIN = (type(None), bool, int, float, complex, str, bytes, bytearray)
_PLAIN += (list, tuple, dict, set, frozenset)


def _truthy(value: Any) -> bool:
    if type(value) not in _PLAIN:
        raise TypeError("not a builtin value")
    return bool(value)


def _host_value(node: ast.expr) -> Any:
    """Value of an expression made only of literals and HOST_FUNCS calls on literals."""
    name = _call_name(node)
    if name in HOST_FUNCS:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords
        ):
            raise ValueError("starred call")
        args = [_host_value(a) for a in node.args]
        kwargs = {k.arg: _host_value(k.value) for k in node.keywords}
        return HOST_FUNCS[name](*args, **kwargs)
    return ast.literal_eval(node)


def _call_name(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return f"{func.value.id}.{func.attr}"
    return None


def _is_check(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.FunctionDef) and stmt.name == "check"


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:  # noqa: N802 - ast API
        return ast.Name(self.new, node.ctx) if node.id == self.old else node


def normalize_output(text: str) -> str:
    """Stdout comparison form: trailing spaces of each line and trailing blank lines dropped."""
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()).rstrip()


def output_matches(actual: str, expected: str) -> bool:
    """Whether a stdin/stdout case passed (judged on the host)."""
    return normalize_output(actual) == normalize_output(expected)
