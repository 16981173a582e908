"""Where the built-in operators' modules moved (issue 29's floor plan), for the compatibility
map of `rldag.config.moved`: old module -> where it went, then where names split out of it went
(``name.*``: a package, moved with everything below it).
"""

from __future__ import annotations

from rldag.config.moved import Moves

OPERATOR_MOVES: Moves = {
    "operators.data.*": ("operators.source",),
    "operators.generate": ("operators.generate.single_turn",),
    "operators.policy_engine": ("operators.generate.policy_engine",),
    "operators.prompt_checks": ("operators.generate.prompt_checks",),
    "operators.agent.*": ("operators.generate.agent",),
    "operators.sandbox_exec": ("operators.sandbox.node",),
    "operators.score": ("operators.score.reward_function",),
    "operators.reward_call": ("operators.score.reward_call",),
    "operators.reward_worker": ("operators.score.reward_worker",),
    "operators.reward_signature": ("operators.score.reward_signature",),
    "operators.rewards.*": ("operators.score.rewards",),
    "operators.reward_service.*": ("operators.score.reward_service",),
    "operators.reward_shaping": ("operators.transform.reward_shaping",),
    "operators.advantage": ("operators.transform.advantage",),
    "operators.dynamic_sampling": ("operators.transform.dynamic_sampling",),
    "operators.kl_reward": ("operators.transform.kl_reward",),
    "operators.overlong_penalty": ("operators.transform.overlong_penalty",),
    "operators.hf": ("operators.model.hf",),
    "operators.lora_weights": ("operators.model.lora_weights",),
    "operators.prompts": ("operators.model.prompts",),
    "operators.tokenizer_checks": ("operators.model.tokenizer_checks",),
    "operators.train.loss": (
        "operators.algorithms.logprobs",
        "operators.algorithms.aggregation",
        "operators.algorithms.policy_losses",
        "operators.algorithms.importance",
    ),
    "operators.tiny_task.*": ("examples.tiny_task",),
}
