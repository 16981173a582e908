"""The RL math by name: registries (operators.algorithms.registry) of advantage estimators
(advantages, reinforce), policy losses (policy_losses), KL estimators (kl) and loss
aggregation modes (aggregation), each extensible with `module:function`; truncated
importance sampling (importance)."""
