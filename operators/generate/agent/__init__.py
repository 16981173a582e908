"""Agentic multi-turn rollouts: the environment contract, tools, tool-call parsers, the loop."""
