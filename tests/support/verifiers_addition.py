"""A verifiers taskset written with verifiers' own API: the tiny addition task ("a+b=", the
answer is the sum), its rubric (the reply is the sum: 1; the reply is one digit: 0.5, a
weighted reward) and a metric (the reply's length).

The module is a verifiers taskset package (``vf.load_taskset`` finds ``AdditionTaskset`` by the
module's name through ``__all__``), and ``rollout`` is its ``agent_gateway`` agent."""

from __future__ import annotations

from collections.abc import Iterator

import verifiers.v1 as vf

from operators.generate.agent.verifiers_env import verifiers_agent

__all__ = ["AdditionTaskset"]


class AdditionData(vf.TaskData):
    answer: str


class AdditionTask(vf.Task[AdditionData]):
    @vf.reward
    async def correct(self, task: AdditionData, trace: vf.Trace) -> float:
        return float(trace.last_reply == task.answer)

    @vf.reward(weight=0.5)
    async def one_digit(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply) == 1 and trace.last_reply.isdigit())

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


class AdditionTaskset(vf.Taskset[AdditionTask]):
    def load(self) -> Iterator[AdditionTask]:
        for a in range(3):
            for b in range(3):
                data = AdditionData(prompt=f"{a}+{b}=", answer=str(a + b))
                yield AdditionTask(data, self.config.task)


def taskset() -> AdditionTaskset:
    return AdditionTaskset(vf.TasksetConfig(id=__name__))


rollout = verifiers_agent(taskset(), max_tokens=4)
