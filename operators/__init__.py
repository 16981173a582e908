"""Built-in operators: the components a pipeline's nodes run. They know nothing of Prefect.

Importing this package registers them (it is the `rldag.operators` entry point) by name, kind
and the path of their definition: a module is imported when a node uses its operator.
"""

from operators.moved import OPERATOR_MOVES
from operators.score.reward_function import score_operator
from operators.score.rewards.arithmetic import compute_score as arithmetic_score
from rldag import NodeKind, register, register_adapter, register_path
from rldag.config.moved import install

BUILTIN = {
    "dataset": (NodeKind.source, "operators.source.dataset:DATASET"),
    "hf_dataset": (NodeKind.source, "operators.source.hf_dataset:HF_DATASET"),
    "torch_engine": (NodeKind.generate, "operators.generate.single_turn:TORCH_ENGINE"),
    "agent_loop": (NodeKind.generate, "operators.generate.agent.loop:AGENT_LOOP"),
    "agent_gateway": (NodeKind.generate, "operators.generate.gateway.node:AGENT_GATEWAY"),
    "sandbox.python": (NodeKind.sandbox, "operators.sandbox.node:SANDBOX_PYTHON"),
    "pass_rate": (NodeKind.score, "operators.score.rewards.pass_rate:PASS_RATE"),
    "grpo_advantage": (NodeKind.transform, "operators.transform.advantage:GRPO_ADVANTAGE"),
    "advantage": (NodeKind.transform, "operators.transform.advantage:ADVANTAGE"),
    "policy_gradient": (NodeKind.train, "operators.train.policy_gradient:POLICY_GRADIENT"),
    "reference_logprobs": (NodeKind.transform, "operators.train.reference:REFERENCE_LOGPROBS"),
    "kl_reward": (NodeKind.transform, "operators.transform.kl_reward:KL_REWARD"),
    "dynamic_sampling": (
        NodeKind.transform,
        "operators.transform.dynamic_sampling:DYNAMIC_SAMPLING",
    ),
    "overlong_penalty": (
        NodeKind.transform,
        "operators.transform.overlong_penalty:OVERLONG_PENALTY",
    ),
    "values": (NodeKind.transform, "operators.train.critic:VALUES"),
    "critic": (NodeKind.train, "operators.train.critic:CRITIC"),
    "reward_model": (NodeKind.score, "operators.score.reward_service.reward_model:REWARD_MODEL"),
    "llm_judge": (NodeKind.score, "operators.score.reward_service.llm_judge:LLM_JUDGE"),
    "remote": (NodeKind.score, "operators.score.reward_service.remote:REMOTE"),
    "combine": (NodeKind.transform, "operators.score.reward_service.combine:COMBINE"),
}

for _name, (_kind, _path) in BUILTIN.items():
    register_path(_name, _kind, _path)
register(score_operator("arithmetic", arithmetic_score))
register_adapter(NodeKind.score, score_operator)
install(OPERATOR_MOVES)  # old module paths of built-in code still import (with a warning)
