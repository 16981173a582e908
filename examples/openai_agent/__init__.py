"""Agents written against the OpenAI SDK, run by the `agent_gateway` node unchanged."""
