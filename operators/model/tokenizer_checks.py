"""What a node needs of its model's tokenizer, checked when the pipeline is validated: one that
loads, a chat template when prompts are chat messages, and a template that renders the tools
a node passes it (else the model never sees their schemas).

Each check raises InputError at `key` (a params key: the graph adds ``nodes.<node>.params.``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rldag import InputError, ModelLoadError

Schema = Mapping[str, Any]  # an OpenAI-style tool schema {"type": "function", "function": ...}


def tokenizer_of(model_path: str, key: str = "model_path") -> Any:
    """The tokenizer of `model_path`; InputError naming the path and the cause if it does not
    load."""
    from operators.model.hf import load_tokenizer

    try:
        tokenizer = load_tokenizer(model_path)
    except ModelLoadError as err:
        raise InputError(str(err), path=key) from None
    tokenizer.model_max_length = 1 << 30  # sample renders may outgrow a tiny window: no warning
    return tokenizer


def require_chat_template(tokenizer: Any, why: str, key: str = "model_path") -> None:
    """InputError unless the tokenizer has a chat template (`why`: what needs one)."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise InputError(
            f"the tokenizer has no chat template ({why}): add one to the model directory "
            "(chat_template.jinja, or chat_template in tokenizer_config.json; see "
            "docs/guides/bring-your-own-model.md)",
            path=key,
        )


def require_tools_rendered(
    tokenizer: Any, tools: Sequence[Schema], messages: Sequence[Mapping[str, Any]], key: str
) -> None:
    """InputError unless rendering `messages` with `tools` differs from rendering them without:
    a template that ignores ``tools`` never shows the model the tools' schemas."""

    def text(tools: list[Schema] | None) -> str:  # text: a tokenizer may lose characters
        return tokenizer.apply_chat_template(
            list(messages), tools=tools, add_generation_prompt=True, tokenize=False
        )

    if text(list(tools)) == text(None):
        names = ", ".join(t.get("function", {}).get("name", "?") for t in tools)
        raise InputError(
            f"the chat template ignores `tools`: the prompt renders the same with the schemas "
            f"of {names} as without them, so the model would never see them; use a template "
            "that renders `tools` (Qwen2.5/Hermes-style templates list them in the system "
            "turn), or set tools_in_template: false if the model learned its tools without "
            "seeing their schemas",
            path=key,
        )
