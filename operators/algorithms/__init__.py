"""The RL math by name: registries (rldag.graph.registry.Registry) of advantage estimators
(advantages, reinforce, gae), policy losses (policy_losses), KL estimators (kl) and loss
aggregation modes (aggregation), each extensible with `module:function`; truncated
importance sampling (importance); per-token log-probs and entropy (logprobs)."""

from rldag.config.errors import UnknownNameError

UnknownAlgorithmError = UnknownNameError  # its name until issue 29; kept for one release
