"""The `llm_judge` score operator: its template is checked against the input's columns, its
verdict parsers (regex, labels, JSON) read the judge's text, which is kept, and unparsable
verdicts go to the node's on_error. The judge here is the tiny policy, in process."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pytest

from operators.generate.single_turn import GenerateParams
from operators.score.reward_function import OnError
from operators.score.reward_service.llm_judge import (
    JudgeParams,
    LLMJudge,
    VerdictParser,
    parse_verdict,
    template_variables,
)
from rldag.config.errors import InputError, RowError, SpecError
from rldag.config.spec import load_pipeline, merge_params
from rldag.graph.dag import build_graph
from rldag.graph.operator import NodeContext
from tests.support.pipelines import scoring_pipeline


def _params(**kw: object) -> JudgeParams:
    return JudgeParams(generate=GenerateParams(model_path="unused"), **{"template": "x", **kw})


@pytest.mark.parametrize(
    ("text", "kw", "score"),
    [
        ("Score: 7/10", {}, 7.0),
        ("the answer is -0.5.", {}, -0.5),
        (
            "Verdict: CORRECT",
            {"pattern": r"Verdict: (\w+)", "labels": {"CORRECT": 1, "WRONG": 0}},
            1.0,
        ),
        ('thinking... {"score": 0.25, "why": "close"} done', {"parser": VerdictParser.json}, 0.25),
        ('{"bad": } {"ok": true}', {"parser": VerdictParser.json, "json_key": "ok"}, 1.0),
    ],
)
def test_verdicts_parse(text, kw, score):
    outcome = parse_verdict(text, _params(**kw))
    assert outcome.error == "" and outcome.score == score
    assert json.loads(outcome.info) == {"judge": text}


@pytest.mark.parametrize(
    ("text", "kw"),
    [
        ("no digits here", {}),
        ("Verdict: MAYBE", {"pattern": r"Verdict: (\w+)", "labels": {"CORRECT": 1}}),
        ("score is 3", {"parser": VerdictParser.json}),
        ('{"score": "high"}', {"parser": VerdictParser.json}),
    ],
)
def test_unparsable_verdicts_are_errors_that_keep_the_text(text, kw):
    outcome = parse_verdict(text, _params(**kw))
    assert "unparsable verdict" in outcome.error and text[:20] in outcome.error
    assert json.loads(outcome.info) == {"judge": text}


def test_bad_templates_and_patterns_name_their_key():
    assert template_variables("{{ prompt }} -> {{ response | upper }} {% if x %}{% endif %}") == [
        "prompt",
        "response",
        "x",
    ]
    for params, key in (({"template": "{{ prompt "}, "template"), ({"pattern": "("}, "pattern")):
        with pytest.raises(SpecError) as info:
            merge_params(
                JudgeParams,
                {"generate": {"model_path": "m"}, "template": "x", **params},
                "p.yaml",
                "nodes.judge.params",
            )
        assert info.value.path == f"nodes.judge.params.{key}"


def test_an_unknown_template_variable_is_a_validation_error_naming_it(write_yaml, dataset):
    doc = scoring_pipeline(dataset)
    doc["nodes"]["judge"] = {
        "kind": "score",
        "op": "llm_judge",
        "inputs": {"rollouts": "answer"},
        "params": {
            "generate": {"model_path": "unused"},
            "template": "Q: {{ prompt }} A: {{ response }} truth: {{ answr }}",
        },
    }
    with pytest.raises(InputError) as info:
        build_graph(load_pipeline(write_yaml(doc)))
    assert info.value.path == "nodes.judge.params.template"
    assert "template variable 'answr' is not a column" in info.value.message
    doc["nodes"]["judge"]["params"]["template"] = "Q: {{ prompt }} truth: {{ ground_truth }}"
    build_graph(load_pipeline(write_yaml(doc)))


@pytest.fixture(scope="module")
def judge_model(tiny_task):
    return str(tiny_task / "model")


def _judge(model: str, **kw: object) -> LLMJudge:
    generate = GenerateParams(model_path=model, temperature=0.0, max_new_tokens=3)
    return LLMJudge(JudgeParams(generate=generate, template="{{ prompt }}", **kw))


ROWS = pa.table(
    {
        "prompt_id": pa.array(range(8), pa.int64()),
        "prompt": [
            f"{a}+{b}=" for a, b in [(1, 2), (3, 4), (5, 5), (9, 8), (0, 0), (2, 7), (6, 6), (4, 1)]
        ],
        "response": ["3"] * 8,
    }
)


def test_the_judge_runs_on_the_rollout_engine_and_keeps_its_text(judge_model):
    judge = _judge(judge_model)
    assert judge.prompts(ROWS) == ROWS["prompt"].to_pylist()
    out = judge({"rollouts": ROWS}, NodeContext("judge", 0, 0, ""))
    texts = [json.loads(i)["judge"] for i in out["reward_info"].to_pylist()]
    for text, reward, error in zip(
        texts, out["reward"].to_pylist(), out["reward_error"].to_pylist(), strict=True
    ):
        number = re.search(r"(-?\d+(?:\.\d+)?)", text)
        assert (error == "") == (number is not None)
        assert reward == (float(number.group(1)) if number else 0.0)
    again = judge({"rollouts": ROWS}, NodeContext("judge", 0, 0, ""))  # greedy: the same
    assert again["reward_info"].to_pylist() == out["reward_info"].to_pylist()


@pytest.mark.parametrize("on_error", ["zero", "drop", "fail"])
def test_unparsable_verdicts_go_to_on_error(judge_model, on_error):
    judge = _judge(judge_model, pattern=r"^(\d)$", on_error=OnError(on_error))  # one digit only
    ctx = NodeContext("judge", 2, 0, "")
    if on_error == "fail":
        with pytest.raises(RowError) as info:
            judge({"rollouts": ROWS}, ctx)
        assert "node 'judge' iteration 2" in str(info.value) and "unparsable verdict" in str(
            info.value
        )
        return
    zero = _judge(judge_model, pattern=r"^(\d)$", on_error=OnError.zero)({"rollouts": ROWS}, ctx)
    texts = [json.loads(i)["judge"] for i in zero["reward_info"].to_pylist()]
    parsed = [re.fullmatch(r"\d", t) is not None for t in texts]
    assert 0 < sum(parsed) < len(parsed), texts  # the tiny judge gives both kinds
    if on_error == "zero":
        assert zero["reward"].to_pylist() == [
            float(t) if p else 0.0 for t, p in zip(texts, parsed, strict=True)
        ]
        assert [e != "" for e in zero["reward_error"].to_pylist()] == [not p for p in parsed]
    else:
        out = judge({"rollouts": ROWS}, ctx)
        kept = [i for i, p in enumerate(parsed) if p]
        assert out["prompt_id"].to_pylist() == kept


@pytest.mark.slow
def test_a_judge_on_a_rollout_server_gives_the_in_process_verdicts(
    judge_model, tmp_path, monkeypatch
):
    from operators.rollout.guard import TOKEN_ENV, new_token
    from operators.rollout.launch import start_local_servers

    token = new_token()  # a running server's token reaches the judge's client by environment
    (server,) = start_local_servers(
        judge_model, 1, token=token, weights_root=tmp_path, log_dir=tmp_path / "logs"
    )
    monkeypatch.setenv(TOKEN_ENV, token)
    try:
        generate = GenerateParams(
            model_path=judge_model,
            temperature=0.0,
            max_new_tokens=3,
            engine="server",
            server_urls=[server.url],
        )
        remote = LLMJudge(
            JudgeParams(generate=generate, template="{{ prompt }}", on_error=OnError.zero)
        )
        served = remote({"rollouts": ROWS}, NodeContext("judge", 0, 0, ""))
        remote.close()
    finally:
        server.stop()
    local = _judge(judge_model, on_error=OnError.zero)(
        {"rollouts": ROWS}, NodeContext("judge", 0, 0, "")
    )
    assert served["reward_info"].to_pylist() == local["reward_info"].to_pylist()
    assert served["reward"].to_pylist() == local["reward"].to_pylist()


def test_a_chat_judge_gets_the_template_as_one_user_message(judge_model):
    # the tiny model's chat template is the messages' contents: the same text either way
    plain = _judge(judge_model)({"rollouts": ROWS}, NodeContext("judge", 0, 0, ""))
    chat = _judge(judge_model, chat=True)({"rollouts": ROWS}, NodeContext("judge", 0, 0, ""))
    assert chat["reward_info"].to_pylist() == plain["reward_info"].to_pylist()
