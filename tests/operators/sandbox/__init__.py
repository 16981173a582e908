"""The code sandbox: its API, attacks on the host, the node."""
