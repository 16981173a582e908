"""Generate nodes: prompts, templates, single-turn sampling."""
