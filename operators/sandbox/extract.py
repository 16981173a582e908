"""Extracting the program from a model response."""

from __future__ import annotations

import re

_FENCE = re.compile(
    r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.-]*)[^\n]*\n(.*?)(?:^[ \t]*\1[ \t]*$|\Z)", re.M | re.S
)
_PYTHON = {"python", "py", "python3", "py3"}


def extract_program(response: str) -> str:
    """The last fenced ```python block; else the last unlabelled fenced block; else the whole
    response. An unterminated final fence (a truncated generation) runs to the end."""
    blocks = [(m.group(2).lower(), m.group(3)) for m in _FENCE.finditer(response)]
    for wanted in (lambda lang: lang in _PYTHON, lambda lang: lang == ""):
        chosen = [body for lang, body in blocks if wanted(lang)]
        if chosen:
            return chosen[-1].rstrip() + "\n"
    return response
