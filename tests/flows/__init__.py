"""The launcher: the `rldag` command, deployments, the Prefect server."""
