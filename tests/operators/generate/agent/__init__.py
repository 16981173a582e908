"""The multi-turn agent loop: environments, tools, parsers."""
