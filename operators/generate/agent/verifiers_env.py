"""`verifiers` environments as agents of the ``agent_gateway`` node: a verifiers *taskset* (its
tasks, their prompts, and the ``@vf.reward`` / ``@vf.metric`` functions that score a trace)
played through the OpenAI client the gateway hands each episode.

``verifiers_agent(taskset)`` gives the ``async def rollout(client, task)`` that
``params.agent`` names (assign it at module level: ``rollout = verifiers_agent(MyTaskset(...))``);
``write_prompts(taskset, path)`` writes the taskset's tasks as the rows of a ``dataset``
source, in ``load()`` order, so a row's ``dataset_index`` is its task's ``idx``. Each episode
sends the task's system prompt and prompt to the model, records the reply in a verifiers
``Trace`` (the task, the messages, the model's reply as the sampled turn), and scores it with
the task's own ``Task.score``: the weighted sum of its rewards is the row's reward; each
reward and metric is kept in ``reward_info``. The rollout is the chat loop of verifiers' tool-less
``null`` harness, one model turn, run in-process: verifiers' own harness programs run under
``uv`` in a runtime (subprocess, Docker, Prime sandboxes) and reach the model through its
interception server, which the gateway's sessions replace. Needs the ``agents`` extra.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rldag import SpecError

if TYPE_CHECKING:
    from verifiers.v1 import Task, Taskset, Trace

_FINISH = ("stop", "length", "tool_calls")
AgentFn = Callable[[Any, dict[str, Any]], Awaitable[dict[str, Any]]]


def _vf() -> Any:
    try:
        import verifiers.v1 as vf
    except ImportError as err:  # pragma: no cover - the agents extra is installed in tests
        raise SpecError(
            f"verifiers is not installed ({err}): pip install 'rldag[agents]'", path="agent"
        ) from None
    return vf


def load_taskset(taskset_id: str, **config: Any) -> Taskset:
    """The verifiers taskset ``taskset_id``, built from its own config class with ``config``:
    an installed taskset package as ``vf.load_taskset`` finds it, or a dotted module path
    (which verifiers' loader does not import) whose ``__all__`` exports one ``vf.Taskset``."""
    vf = _vf()
    if "." not in taskset_id:
        cfg = vf.taskset_config_type(taskset_id).model_validate({"id": taskset_id, **config})
        return vf.load_taskset(cfg)
    from verifiers.v1.utils.generic import concrete_type

    module = importlib.import_module(taskset_id)
    found = [getattr(module, name, None) for name in getattr(module, "__all__", [])]
    classes = [c for c in found if isinstance(c, type) and issubclass(c, vf.Taskset)]
    if len(classes) != 1:
        names = [c.__name__ for c in classes]
        raise SpecError(
            f"'{taskset_id}' must export one vf.Taskset subclass in __all__, found {names}",
            path="agent",
        )
    config_type = concrete_type(classes[0], vf.TasksetConfig, origin=vf.Taskset)
    cfg = (config_type or vf.TasksetConfig).model_validate({"id": taskset_id, **config})
    return classes[0](cfg)


def _tasks(taskset: Taskset | Iterable[Task]) -> list[Task]:
    tasks = list(taskset)
    if not tasks:
        raise SpecError("the verifiers taskset has no tasks", path="agent")
    return tasks


def _ground_truth(task: Task) -> str:
    """The task's answer for the row's ``ground_truth`` (its ``answer`` field; "" if none)."""
    answer = getattr(task.data, "answer", None)
    return "" if answer is None else str(answer)


def prompt_rows(taskset: Taskset | Iterable[Task]) -> list[dict[str, Any]]:
    """The tasks as prompt rows (``prompt``, ``ground_truth``, ``data_source``,
    ``extra_info`` with the task's ``verifiers_key``), in ``load()`` order."""
    rows = []
    for task in _tasks(taskset):
        rows.append(
            {
                "prompt": task.data.prompt_text,
                "ground_truth": _ground_truth(task),
                "data_source": f"verifiers:{type(task).__name__}",
                "extra_info": json.dumps({"verifiers_key": task.key, "idx": task.data.idx}),
            }
        )
    return rows


def write_prompts(taskset: Taskset | Iterable[Task], path: str | Path) -> Path:
    """The taskset's prompt rows written as Parquet at ``path`` (a ``dataset`` source)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(prompt_rows(taskset)), out)
    return out


def _messages(task: Task) -> list[dict[str, Any]]:
    """The task's opening messages as OpenAI chat messages."""
    data = task.data
    messages: list[dict[str, Any]] = []
    if data.system_prompt:
        messages.append({"role": "system", "content": data.system_prompt})
    if isinstance(data.prompt, str):
        messages.append({"role": "user", "content": data.prompt})
    else:
        messages += [m.model_dump(exclude_none=True) for m in data.prompt or []]
    return messages


def _trace(task: Task, prompt: list[dict[str, Any]], reply: str, finish: str | None) -> Trace:
    """A verifiers trace of one model turn: the prompt's messages, then the reply."""
    vf = _vf()
    from pydantic import TypeAdapter

    trace = vf.Trace(
        task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=vf.AgentInfo(config=vf.AgentConfig()),
    )
    adapter: TypeAdapter[Any] = TypeAdapter(vf.Message)
    parent: int | None = None
    for i, message in enumerate(prompt):
        trace.nodes.append(vf.MessageNode(parent=parent, message=adapter.validate_python(message)))
        parent = i
    answer = vf.AssistantMessage(content=reply)
    trace.nodes.append(vf.MessageNode(parent=parent, message=answer, sampled=True))
    finish = finish if finish in _FINISH else None  # verifiers knows these three
    trace.calls.append(vf.ModelCall(node=len(trace.nodes) - 1, finish_reason=finish))
    trace.is_completed = True
    return trace


def _key(task: dict[str, Any]) -> str | None:
    info = task.get("extra_info")
    if isinstance(info, str) and info:
        info = json.loads(info)
    return info.get("verifiers_key") if isinstance(info, dict) else None


def verifiers_agent(
    taskset: Taskset | Iterable[Task], model: str = "policy", max_tokens: int | None = None
) -> AgentFn:
    """The gateway agent that plays ``taskset``'s tasks: the row's ``dataset_index`` picks
    the task (its ``verifiers_key`` in ``extra_info``, when present, must match), the model
    answers once, and the task's rewards score the reply."""
    tasks = _tasks(taskset)

    async def rollout(client: Any, task: dict[str, Any]) -> dict[str, Any]:
        index = int(task["dataset_index"])
        if not 0 <= index < len(tasks):
            raise IndexError(f"dataset_index {index} is not a task of the taskset ({len(tasks)})")
        vf_task = tasks[index]
        key = _key(task)
        if key is not None and key != vf_task.key:
            raise ValueError(
                f"row {index} was written for another task (key {key}, the taskset's "
                f"{vf_task.key}): write the prompts again with write_prompts"
            )
        prompt = _messages(vf_task)
        extra = {} if max_tokens is None else {"max_tokens": max_tokens}
        response = await client.chat.completions.create(model=model, messages=prompt, **extra)
        choice = response.choices[0]
        trace = _trace(vf_task, prompt, choice.message.content or "", choice.finish_reason)
        await vf_task.score(trace)
        rewards = {k: None if r is None else r.score for k, r in trace.rewards.items()}
        return {"reward": trace.reward, "rewards": rewards, "metrics": dict(trace.metrics)}

    return rollout
