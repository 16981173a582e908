"""A character-level tokenizer for the code task, trained locally with HF ``tokenizers``.

Every character of printable ASCII, newline and tab is one token (digits one per token), so any
prompt or simple program encodes and decodes losslessly. It is a BPE model with no merges over
a byte-level alphabet: the pre-tokenizer isolates each character and maps it to its byte-level
image (space is ``Ġ``, newline ``Ċ``), the decoder maps back. The byte-level form matters:
``AutoTokenizer`` loads a tokenizer saved next to a Qwen2 config as ``Qwen2Tokenizer``, which
rebuilds it from the vocabulary and merges with its own byte-level pre-tokenizer and decoder;
with no merges that reads exactly the same ids and text. (Characters outside the alphabet
become ``<unk>`` here but are dropped by ``Qwen2Tokenizer``.)

Special tokens are ``<pad> <eos> <bos> <unk>`` (ids 0-3); nothing is added when encoding. The
chat template concatenates message contents, so one user message renders as exactly its text
and the generation prompt is empty.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from examples.tiny_task.tokenizer import SPECIAL_TOKENS, UNK_TOKEN, wrap_for_transformers

ALPHABET = "".join(chr(c) for c in range(32, 127)) + "\n\t"
MODEL_MAX_LENGTH = 256


def train_char_tokenizer(corpus: Iterable[str]) -> PreTrainedTokenizerFast:
    """Trains the character-level tokenizer on ``corpus`` and wraps it for ``transformers``."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    images = sorted({c for piece, _ in byte_level.pre_tokenize_str(ALPHABET) for c in piece})
    raw = Tokenizer(models.BPE(unk_token=UNK_TOKEN))
    raw.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated"), byte_level]
    )
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=len(SPECIAL_TOKENS) + len(images),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=images,
        show_progress=False,
    )
    raw.train_from_iterator(sorted(corpus), trainer=trainer)
    return wrap_for_transformers(
        raw, model_max_length=MODEL_MAX_LENGTH, clean_up_tokenization_spaces=False
    )
