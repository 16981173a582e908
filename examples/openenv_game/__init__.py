"""Environments written with OpenEnv's own API, run by the `OpenEnvEnvironment` adapter."""
