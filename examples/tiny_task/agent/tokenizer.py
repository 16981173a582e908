"""A byte-level BPE tokenizer for the tiny agent tasks, built as ``Qwen2Tokenizer``.

Trained locally with HF ``tokenizers`` using Qwen2's own pre-tokenization (its split regex,
then byte-level), so the merges learned here (``lookup``, ``<tool``, ``":{"`` ...) are the
ones ``AutoTokenizer`` applies when it loads the model directory back as ``Qwen2Tokenizer``:
the warm-up and the rollouts see the same ids. Digits stay one token each (the regex splits
them). The alphabet is only the corpus's characters, a small vocabulary (what RL takes from
a sampled token goes to few others); other characters are dropped. Special tokens
``<pad> <eos> <bos> <unk>``, left padding, and a concatenating chat template that closes
each assistant turn on EOS.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerBase
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX, Qwen2Tokenizer

from examples.tiny_task.tokenizer import SPECIAL_TOKENS, TOKENIZER_KWARGS, UNK_TOKEN

MERGES = 64  # learned merges on top of the byte alphabet
MODEL_MAX_LENGTH = 128
# An assistant turn ends on EOS (the model samples it), so the text that follows a turn never
# merges with it; other messages are plain text, which the model continues straight on (the
# turn that opens with a letter after a letter is the rare one a BPE merge re-tokenises, and
# agent_loop ends that episode).
AGENT_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['content'] }}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
)


def train_agent_tokenizer(corpus: Iterable[str]) -> PreTrainedTokenizerBase:
    """Trains the BPE on ``corpus`` and returns it as a ``Qwen2Tokenizer``."""
    raw = Tokenizer(models.BPE(unk_token=UNK_TOKEN))
    raw.normalizer = normalizers.NFC()
    raw.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    raw.decoder = decoders.ByteLevel()
    lines = sorted(corpus)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    alphabet = sorted(
        {c for line in lines for piece, _ in byte_level.pre_tokenize_str(line) for c in piece}
    )
    trainer = trainers.BpeTrainer(
        vocab_size=len(SPECIAL_TOKENS) + len(alphabet) + MERGES,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),
        show_progress=False,
    )
    raw.train_from_iterator(lines, trainer=trainer)
    model = json.loads(raw.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split()) for m in model["merges"]]
    tokenizer = Qwen2Tokenizer(
        vocab=model["vocab"],
        merges=merges,
        model_max_length=MODEL_MAX_LENGTH,
        **TOKENIZER_KWARGS,
    )
    tokenizer.chat_template = AGENT_CHAT_TEMPLATE
    return tokenizer
