"""The reference pages of the docs site, generated from the code so they cannot drift.

`docs/hooks/reference.py` adds each page to the mkdocs build (nothing is committed); run
`python docs/gen_reference.py cli|pipeline-yaml|operators|registries` to print one page.

* `pipeline-yaml`: every key of pipeline.yaml, walked from the spec dataclasses: key path,
  type, default, choices and the one-line description from the field's comment (a comment on
  its line, else the comment lines right above it). A key without a comment is an error.
* `operators`: the operator registry: name, kind, pool, ports and their columns, the columns
  each adds, its description and its params.
* `registries`: the RL math by name (advantage estimators, policy losses, KL estimators, loss
  aggregations), tool-call parsers, built-in tools and Gym formatters.
* `cli`: the `rldag` command, from its argument parser.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, Path(__file__).parent):  # the project, and reference_text beside this file
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

# ---- The project's modules ----
# ---- end of the project's modules ----
from reference_text import cell, describe, field_comments, first_line  # noqa: E402

import operators  # noqa: E402  (BUILTIN: each built-in operator's `module:attr`)
from flows.cli import __doc__ as CLI_DOC  # noqa: E402
from flows.cli import build_parser  # noqa: E402
from operators.algorithms.advantages import ADVANTAGE_ESTIMATORS  # noqa: E402
from operators.algorithms.aggregation import LOSS_AGGREGATIONS  # noqa: E402
from operators.algorithms.kl import KL_ESTIMATORS  # noqa: E402
from operators.algorithms.policy_losses import POLICY_LOSSES  # noqa: E402
from operators.generate.agent.factory import TOOLS  # noqa: E402
from operators.generate.agent.gym_env import GYM_FORMATTERS, GYM_PARSERS  # noqa: E402
from operators.generate.agent.parsers import TOOL_PARSERS  # noqa: E402
from rldag.config.errors import GraphError  # noqa: E402
from rldag.config.spec import (  # noqa: E402
    DEFAULT_POOL,
    POOL_KEYS,
    YAML_KEYS,
    NodeKind,
    PipelineSpec,
    PoolName,
)
from rldag.graph.registry import load_plugins, operator_names, resolve  # noqa: E402

GENERATED = (
    "<!-- Generated at build time by docs/gen_reference.py (docs/hooks/reference.py); "
    "edit the code, not this page. -->\n\n"
)


class MissingDescription(Exception):
    """A spec field without a comment: the reference would have a key nobody described."""


# --------------------------------------------------------------------------- pipeline.yaml


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is None:
        if tp is type(None):
            return "null"
        return getattr(tp, "__name__", str(tp))
    args = typing.get_args(tp)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " | ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    name = getattr(origin, "__name__", str(origin))
    return f"{name}[{', '.join(_type_name(a) for a in args)}]"


def _choices(tp: Any) -> list[str]:
    candidates = [tp, *typing.get_args(tp)]
    for c in candidates:
        if isinstance(c, type) and issubclass(c, Enum):
            return [str(m.value) for m in c]
    return []


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return "(section)"
    if (
        isinstance(value, dict)
        and value
        and all(dataclasses.is_dataclass(v) for v in value.values())
    ):
        return ", ".join(value) + " (each with the defaults below)"
    if isinstance(value, Enum):
        return f"`{value.value}`"
    if value == "???":  # omegaconf's MISSING
        return "required"
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value!r}`" if not isinstance(value, str) else f'`"{value}"`'


def _yaml_key(name: str) -> str:
    inverse = {field: key for key, field in YAML_KEYS.items()}
    return inverse.get(name, name)


def _inner_dataclass(tp: Any) -> tuple[type | None, str]:
    """(the dataclass a field holds, how its key path continues): `x.`, or `x.<name>.` for a
    dict of dataclasses, or `x[]` for a list of them."""
    if dataclasses.is_dataclass(tp):
        return tp, ""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is dict and len(args) == 2 and dataclasses.is_dataclass(args[1]):
        return args[1], ".<name>"
    if origin is list and args and dataclasses.is_dataclass(args[0]):
        return args[0], "[]"
    return None, ""


def spec_rows(cls: type, prefix: str = "") -> list[tuple[str, type, list[tuple[str, ...]]]]:
    """Sections (key path, dataclass, rows of key/type/default/description), depth first."""
    hints = typing.get_type_hints(cls)
    comments = field_comments(cls)
    rows: list[tuple[str, ...]] = []
    nested: list[tuple[str, type, list[tuple[str, ...]]]] = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        key = _yaml_key(f.name)
        path = f"{prefix}{key}"
        if cls.__name__ == "PoolsSpec" and f.name == "named":
            path = f"{prefix.rstrip('.')}"  # pools.<name> in pipeline.yaml
        description = comments.get(f.name)
        if not description:
            raise MissingDescription(
                f"{cls.__module__}.{cls.__qualname__}.{f.name} ({path}) has no comment: give it "
                "a one-line description as a trailing comment or a comment line above it"
            )
        inner, suffix = _inner_dataclass(tp)
        type_text = _type_name(tp)
        choices = _choices(tp)
        if choices:
            type_text += ": " + " | ".join(f"`{c}`" for c in choices)
        rows.append((f"`{path}`", type_text, _default(f), description))
        if inner is not None:
            nested.extend(spec_rows(inner, f"{path}{suffix}."))
    return [(prefix.rstrip("."), cls, rows), *nested]


def gen_pipeline_yaml() -> str:
    """reference/pipeline-yaml.md."""
    out = [
        GENERATED,
        "# pipeline.yaml keys\n\n",
        "Every key of `pipeline.yaml`, read from the spec dataclasses: its type, its default and "
        "what it is for. Unknown keys, wrong types and missing required values are errors that "
        "name the key (`rldag validate`). Override any key on the command line as "
        "`key=value` (`rldag run pipeline.yaml iterations=3`), or with `-f FILE.yaml`.\n\n",
        f"`async:` is a Python keyword, held as the spec's `async_`; each `pools.<name>` is held "
        f"under `pools.named` (`pools.{'`, `pools.'.join(POOL_KEYS)}` stays). A node's `params` "
        "are checked against its operator's params: see [Operators](operators.md).\n\n",
    ]
    for path, cls, rows in spec_rows(PipelineSpec):
        title = f"`{path}`" if path else "Top level"
        out.append(f"## {title}\n\n")
        if doc := first_line(cls):
            out.append(f"{doc}\n\n")
        out.append("| key | type | default | description |\n|---|---|---|---|\n")
        for row in rows:
            out.append("| " + " | ".join(cell(c) for c in row) + " |\n")
        out.append("\n")
    return "".join(out)


# --------------------------------------------------------------------------- operators


def _columns(cols: tuple[Any, ...]) -> str:
    return ", ".join(f"`{c.name}` (`{c.type}`)" for c in cols) or "—"


def _params_table(params: type) -> list[str]:
    hints = typing.get_type_hints(params)
    comments: dict[str, str] = {}
    for base in reversed(params.__mro__):  # inherited fields keep their own class's comments
        if dataclasses.is_dataclass(base):
            comments.update(field_comments(base))
    lines = ["| param | type | default | description |\n", "|---|---|---|---|\n"]
    for f in dataclasses.fields(params):
        tp = hints[f.name]
        type_text = _type_name(tp)
        if choices := _choices(tp):
            type_text += ": " + " | ".join(f"`{c}`" for c in choices)
        row = (f"`{f.name}`", type_text, _default(f), comments.get(f.name, ""))
        lines.append("| " + " | ".join(cell(c) for c in row) + " |\n")
    return lines


def _operator(name: str) -> Any:
    for kind in NodeKind:
        try:
            return resolve(name, kind)
        except GraphError:
            continue
    raise GraphError(f"operator {name!r} resolves for no kind")


def gen_operators() -> str:
    """reference/operators.md."""
    load_plugins()
    defs = [_operator(name) for name in operator_names()]
    out = [
        GENERATED,
        "# Operators\n\n",
        "The built-in operators a node's `op:` can name, by kind, from the operator registry. "
        "A node may also name user code as `module:function` (see "
        "[The pipeline](../concepts/pipeline.md)). Ports are the node's `inputs:`; *weights* "
        "is the loop-carried weights edge. Columns added are appended to the first port's "
        "table (or, where it says *replaces*, the output has only them).\n\n",
    ]
    for kind in NodeKind:
        ops = [d for d in defs if d.kind == kind]
        if not ops:
            continue
        out.append(f"## {kind.value}\n\n")
        for d in ops:
            path = operators.BUILTIN.get(d.name, (kind, ""))[1] or (
                f"{d.factory.__module__}:{d.name}"
            )
            out.append(f"### `{d.name}`\n\n")
            if d.description:
                out.append(f"{d.description}\n\n")
            elif d.params is not None and (doc := first_line(d.params)):
                out.append(f"{doc}\n\n")
            from_kind = "by kind" if d.pool is None else "its own"
            pool = d.pool or DEFAULT_POOL.get(kind, PoolName.driver).value
            facts = [
                f"defined at `{path}`",
                f"pool `{pool}` ({from_kind})",
                f"dispatch `{d.dispatch}`",
            ]
            if d.stateful:
                facts.append("stateful (lives in a pool worker for the run)")
            if d.streams:
                per = "takes each chunk as it arrives" if d.consumes_chunks else "runs per chunk"
                waits = ", unless its params need the whole table" if d.waits_for else ""
                facts.append(f"streams ({per} of prompt groups{waits})")
            if d.emits_chunks:
                facts.append("emits chunks")
            if d.checkpointable:
                facts.append("checkpointed")
            out.append("; ".join(facts) + ".\n\n")
            if d.ports or d.named_ports:
                out.append("| port | required columns |\n|---|---|\n")
                for p in d.ports:
                    what = "the weights edge" if p.weights else _columns(p.columns)
                    opt = " (optional)" if p.optional else ""
                    out.append(f"| `{p.name}`{opt} | {cell(what)} |\n")
                if d.named_ports is not None:
                    out.append(f"| *any other name* | {cell(_columns(d.named_ports.columns))} |\n")
                out.append("\n")
            added = _columns(d.adds)
            verb = "Adds" if d.passthrough else "Replaces its input with"
            out.append(f"{verb}: {added}.\n\n")
            if d.params is not None and dataclasses.is_dataclass(d.params):
                out.extend(_params_table(d.params))
                out.append("\n")
    return "".join(out)


# --------------------------------------------------------------------------- registries


def _table(entries: dict[str, Callable[..., Any]]) -> list[str]:
    by_object: dict[int, list[str]] = {}
    for name, fn in entries.items():
        by_object.setdefault(id(fn), []).append(name)
    lines = ["| name | aliases | what |\n", "|---|---|---|\n"]
    for name in sorted(entries):
        names = by_object[id(entries[name])]
        if names[0] != name:
            continue
        aliases = ", ".join(f"`{a}`" for a in names[1:]) or "—"
        lines.append(f"| `{name}` | {aliases} | {cell(describe(entries[name]))} |\n")
    return lines


def gen_registries() -> str:
    """reference/registries.md."""
    sections = [
        (
            "Advantage estimators",
            "`estimator:` of the `advantage` transform (and `critic`'s GAE).",
            ADVANTAGE_ESTIMATORS,
        ),
        ("Policy losses", "`policy_loss:` of `policy_gradient`.", POLICY_LOSSES),
        ("KL estimators", "The KL estimator of `policy_gradient` and `kl_reward`.", KL_ESTIMATORS),
        ("Loss aggregations", "`loss_agg_mode:` of `policy_gradient`.", LOSS_AGGREGATIONS),
        ("Tool-call parsers", "`tool_parser:` of `agent_loop`.", TOOL_PARSERS),
        ("Tools", "`tools:` of `agent_loop` (built-in names).", TOOLS),
        (
            "Gym observation formatters",
            "`env_params.formatter` of the Gymnasium environment (`GymTextEnvironment`).",
            GYM_FORMATTERS,
        ),
        (
            "Gym action parsers",
            "`env_params.parser` of the Gymnasium environment (`GymTextEnvironment`).",
            GYM_PARSERS,
        ),
    ]
    out = [
        GENERATED,
        "# Registries\n\n",
        "Names a pipeline's params accept. Each also accepts `module:function` for your own "
        "code (see [Algorithms](../guides/algorithms.md)).\n\n",
    ]
    for title, where, registry in sections:
        out.append(f"## {title}\n\n{where}\n\n")
        out.extend(_table({n: registry.get(n) for n in registry.names()}))
        out.append("\n")
    return "".join(out)


# --------------------------------------------------------------------------- cli


def _subcommands(parser: argparse.ArgumentParser) -> tuple[dict[str, Any], dict[str, str]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return dict(action.choices), helps
    return {}, {}


def gen_cli() -> str:
    """reference/cli.md."""
    parser = build_parser()
    exit_codes = next((line for line in CLI_DOC.splitlines() if line.startswith("Exit codes")), "")
    intro = " ".join(CLI_DOC.split("\n\n")[0].split())
    out = [
        GENERATED,
        "# The `rldag` command\n\n",
        f"{intro}\n\n",
        f"{exit_codes}\n\n" if exit_codes else "",
    ]
    subs, helps = _subcommands(parser)
    for name, sub in subs.items():
        out.append(f"## `rldag {name}`\n\n{helps.get(name, '')}\n\n")
        usage = " ".join(sub.format_usage().split())
        out.append(f"```text\n{usage.removeprefix('usage: ')}\n```\n\n")
        out.append("| argument | default | help |\n|---|---|---|\n")
        for a in sub._actions:
            if isinstance(a, argparse._HelpAction):
                continue
            flags = ", ".join(a.option_strings) or (a.metavar or a.dest)
            if a.choices:
                flags += " {" + ",".join(map(str, a.choices)) + "}"
            default = "" if a.default in (None, [], "", False, argparse.SUPPRESS) else a.default
            out.append(f"| `{cell(flags)}` | {cell(str(default))} | {cell(a.help or '')} |\n")
        out.append("\n")
    return "".join(out)


PAGES: dict[str, Callable[[], str]] = {
    "pipeline-yaml": gen_pipeline_yaml,
    "operators": gen_operators,
    "registries": gen_registries,
    "cli": gen_cli,
}


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in PAGES:
        sys.exit(f"usage: python docs/gen_reference.py {'|'.join(PAGES)}")
    sys.stdout.write(PAGES[sys.argv[1]]())
