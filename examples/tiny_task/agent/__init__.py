"""Tiny agent tasks for the multi-turn examples: ``guess`` (the guessing game,
examples/agent_env.yaml) and ``lookup`` (facts only a tool knows, examples/agent_tools.yaml).

Each builds like the other tiny tasks (``python -m examples.tiny_task --task guess --out
DIR``): a byte-level BPE tokenizer that loads back as ``Qwen2Tokenizer``, the tiny Qwen2, a
warm-up on synthetic episodes rendered token in / token out exactly as ``agent_loop`` renders
them, and the prompts as veRL parquet.
"""
