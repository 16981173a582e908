"""Built-in operators: the components a pipeline's nodes run. They know nothing of Prefect.

Importing this package registers them (it is the `rldag.operators` entry point).
"""

from operators.advantage import ADVANTAGE, GRPO_ADVANTAGE
from operators.agent.loop import AGENT_LOOP
from operators.data.dataset import DATASET
from operators.data.hf_dataset import HF_DATASET
from operators.dynamic_sampling import DYNAMIC_SAMPLING
from operators.generate import TORCH_ENGINE
from operators.kl_reward import KL_REWARD
from operators.overlong_penalty import OVERLONG_PENALTY
from operators.reward_service.combine import COMBINE
from operators.reward_service.llm_judge import LLM_JUDGE
from operators.reward_service.remote import REMOTE
from operators.reward_service.reward_model import REWARD_MODEL
from operators.rewards.arithmetic import compute_score as arithmetic_score
from operators.rewards.pass_rate import PASS_RATE
from operators.sandbox_exec import SANDBOX_PYTHON
from operators.score import score_operator
from operators.train.critic import CRITIC, VALUES
from operators.train.policy_gradient import POLICY_GRADIENT
from operators.train.reference import REFERENCE_LOGPROBS
from rldag.registry import register, register_adapter
from rldag.spec import NodeKind

for _op in (
    DATASET,
    HF_DATASET,
    TORCH_ENGINE,
    AGENT_LOOP,
    SANDBOX_PYTHON,
    PASS_RATE,
    GRPO_ADVANTAGE,
    ADVANTAGE,
    POLICY_GRADIENT,
    REFERENCE_LOGPROBS,
    KL_REWARD,
    DYNAMIC_SAMPLING,
    OVERLONG_PENALTY,
    VALUES,
    CRITIC,
    REWARD_MODEL,
    LLM_JUDGE,
    REMOTE,
    COMBINE,
):
    register(_op)
register(score_operator("arithmetic", arithmetic_score))
register_adapter(NodeKind.score, score_operator)
