"""Prefect flows of rldag: the RL loop and its per-iteration subflow.

Importing the package sets the server-side Prefect defaults (flows/settings.py) before any
embedded server starts.
"""

from flows.settings import apply_server_defaults

apply_server_defaults()
