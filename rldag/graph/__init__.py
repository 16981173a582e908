"""The typed DAG of one iteration: nodes and edges, the operator contract, Arrow column schemas,
the registry."""

from rldag.config.moved import forward

# The names of the module this package replaced, with a warning naming the new path.
__getattr__ = forward(__name__, "rldag.graph.dag")
