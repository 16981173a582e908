"""`llm_judge` score operator: a frozen generative judge, run by the same rollout engine as
the `torch_engine` generate node (in process, or on rollout/SGLang servers: `server_urls`).

Each row's judge prompt is a Jinja template over the row's columns (``{{ prompt }}``,
``{{ response }}``, ``{{ ground_truth }}``, any column); a variable that is not a column of
the node's input is a validation error naming it. The judge answers greedily (or as its
`generate` params say) and a parser reads the verdict from its text: `regex` (the first
capture group of `pattern`, a number or a key of `labels`) or `json` (the first ``{...}``
object's `json_key`). The judge's text is kept in `reward_info`; a verdict that cannot be
parsed makes the row an error row for the node's `on_error`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

import jinja2
import jinja2.meta
import pyarrow as pa
from omegaconf import MISSING

from operators.generate.single_turn import GenerateParams, TorchGenerate
from operators.score.reward_call import RewardOutcome
from operators.score.reward_function import OnError, scored_table
from rldag import InputError, NodeContext, NodeKind, OperatorDef, Port, SpecError, col

ENV = jinja2.Environment(
    undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True
)


class VerdictParser(StrEnum):
    """How the judge's text becomes a score."""

    regex = "regex"  # the first capture group of `pattern` (or the whole match)
    json = "json"  # the first JSON object in the text, its `json_key`


@dataclass
class JudgeParams:
    """Parameters of the `llm_judge` score operator."""

    generate: GenerateParams = MISSING  # the judge model and its sampling (n is always 1)
    template: str = MISSING  # Jinja over the row's columns: the judge's prompt
    chat: bool = False  # send the rendered template as one user message (chat template)
    parser: VerdictParser = VerdictParser.regex
    pattern: str = r"(-?\d+(?:\.\d+)?)"  # regex: where the verdict is
    labels: dict[str, float] = field(default_factory=dict)  # regex: verdict text -> score
    json_key: str = "score"  # json: the verdict's key
    on_error: OnError = OnError.fail  # fail | zero | drop (unparsable verdicts too)

    def __post_init__(self) -> None:
        try:
            ENV.parse(self.template)
        except jinja2.TemplateSyntaxError as err:
            raise SpecError(f"not a valid Jinja template: {err}", path="template") from None
        try:
            re.compile(self.pattern)
        except re.error as err:
            raise SpecError(f"not a valid regular expression: {err}", path="pattern") from None


def template_variables(template: str) -> list[str]:
    """The variables a template reads, sorted."""
    return sorted(jinja2.meta.find_undeclared_variables(ENV.parse(template)))


def check_template(params: JudgeParams, inputs: Mapping[str, pa.Schema]) -> None:
    """Every variable of the template must be a column of the node's input."""
    schema = inputs["rollouts"]
    for name in template_variables(params.template):
        if name not in schema.names:
            raise InputError(
                f"template variable '{name}' is not a column of the input "
                f"(columns: {', '.join(schema.names)})",
                path="template",
            )


def _score(value: object, labels: Mapping[str, float]) -> float | None:
    if isinstance(value, str) and value.strip() in labels:
        return float(labels[value.strip()])
    if isinstance(value, bool):
        return float(value)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _first_json_object(text: str) -> object:
    decoder = json.JSONDecoder()
    for start in (m.start() for m in re.finditer(r"\{", text)):
        try:
            return decoder.raw_decode(text, start)[0]
        except json.JSONDecodeError:
            continue
    return None


def parse_verdict(text: str, params: JudgeParams) -> RewardOutcome:
    """The judge's score from its text; an error outcome saying why when there is none."""
    info = json.dumps({"judge": text})
    if params.parser == VerdictParser.json:
        found = _first_json_object(text)
        value = found.get(params.json_key) if isinstance(found, dict) else None
        what = f"no JSON object with a numeric '{params.json_key}'"
    else:
        match = re.search(params.pattern, text)
        value = (match.group(1) if match.groups() else match.group(0)) if match else None
        what = f"no match of {params.pattern!r} that is a number or one of the labels"
    score = _score(value, params.labels) if value is not None else None
    if score is None:
        short = text if len(text) <= 80 else text[:77] + "..."
        return RewardOutcome(info=info, error=f"gave an unparsable verdict ({what}): {short!r}")
    return RewardOutcome(score, info)


class LLMJudge:
    """Renders each row's judge prompt, generates the verdicts and parses them."""

    def __init__(self, params: JudgeParams) -> None:
        self.p = params
        self.template = ENV.from_string(params.template)
        self.variables = template_variables(params.template)
        self.engine = TorchGenerate(replace(params.generate, n=1))

    def prompts(self, table: pa.Table) -> list[str]:
        """The judge prompt of every row."""
        rows = table.select(self.variables).to_pylist()
        return [self.template.render(**row) for row in rows]

    def __call__(self, inputs: Mapping[str, pa.Table], ctx: NodeContext) -> pa.Table:
        table = inputs["rollouts"]
        texts = self.prompts(table)
        prompts = [[{"role": "user", "content": t}] for t in texts] if self.p.chat else texts
        asks = pa.table({"prompt_id": pa.array(range(len(texts)), pa.int64()), "prompt": prompts})
        verdicts = self.engine({"prompts": asks}, ctx)["response"].to_pylist()
        outcomes = [parse_verdict(v, self.p) for v in verdicts]
        judge = f"judge {self.p.generate.model_path}"
        return scored_table(table, outcomes, self.p.on_error, ctx, judge)

    def close(self) -> None:
        self.engine.close()


LLM_JUDGE = OperatorDef(
    name="llm_judge",
    kind=NodeKind.score,
    factory=LLMJudge,
    ports=(Port("rollouts"),),
    adds=(col("reward"), col("reward_info"), col("reward_error", pa.string())),
    params=JudgeParams,
    check_input=check_template,
    stateful=True,
    streams=True,
    description="A frozen generative judge: Jinja prompt per row, verdict by regex or JSON.",
)
