"""The typed DAG of one iteration: nodes and edges, the operator contract, Arrow column schemas,
the registry."""
