"""rldag: reinforcement learning for LLMs as a declarative dataflow graph."""

__version__ = "0.1.0"
