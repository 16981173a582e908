"""Text of the generated reference pages: a dataclass field's description from its comment,
a registry entry's from its docstring, and Markdown table cells (docs/gen_reference.py)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
from typing import Any


def field_comments(cls: type) -> dict[str, str]:
    """Each annotated field of `cls` -> its comment: the trailing comment of the line it starts
    on, else the block of comment lines right above it (joined)."""
    source = textwrap.dedent(inspect.getsource(cls))
    trailing: dict[int, str] = {}
    alone: dict[int, str] = {}
    code_lines: set[int] = set()
    skip = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        line = tok.start[0]
        if tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            (trailing if line in code_lines else alone)[line] = text
        elif tok.type not in skip:
            code_lines.update(range(tok.start[0], tok.end[0] + 1))
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    found: dict[str, str] = {}
    for stmt in body.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        if stmt.lineno in trailing:
            found[stmt.target.id] = trailing[stmt.lineno]
            continue
        above, line = [], stmt.lineno - 1
        while line in alone:
            above.insert(0, alone[line])
            line -= 1
        if above:
            found[stmt.target.id] = " ".join(above)
    return found


def first_line(obj: Any) -> str:
    """The first paragraph of an object's docstring (reST ``code`` as Markdown), or ''."""
    doc = inspect.getdoc(obj) or ""
    return " ".join(doc.split("\n\n")[0].split()).replace("``", "`")


def describe(obj: Any) -> str:
    """What a registry entry does: its docstring; for a dataclass instance wrapping a function
    (a loss aggregation), that function's, with the other fields' values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        values = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        fn = next((v for v in values.values() if inspect.isfunction(v)), None)
        if fn is not None:
            rest = ", ".join(f"{k}: {v}" for k, v in values.items() if v is not fn)
            return f"{first_line(fn)} ({rest})" if rest else first_line(fn)
    return first_line(obj)


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell: pipes escaped, and `<`, `>` outside code spans
    (`<run>/hf/<node>` is not HTML)."""
    parts = text.replace("|", "\\|").replace("\n", " ").split("`")
    for i in range(0, len(parts), 2):  # the even parts are outside code spans
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)
