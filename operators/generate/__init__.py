"""Generate nodes: n samples per prompt from the policy, and the multi-turn agent loop."""

from rldag.config.moved import forward

# The names of the module this package replaced, with a warning naming the new path.
__getattr__ = forward(__name__, "operators.generate.single_turn")
