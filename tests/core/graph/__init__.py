"""The DAG, the operator contract, the registry."""
