"""A tiny tokenizer trained locally on the arithmetic corpus with HF ``tokenizers``.

It is a word-level model whose pre-tokenizer splits every digit into its own token and isolates
punctuation, so ``"12+3="`` becomes ``1 2 + 3 =``. Decoding fuses tokens back without spaces.
The chat template just concatenates message contents, so ``apply_chat_template`` of one user
message yields exactly the raw prompt, and the generation prompt is empty.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<pad>"
EOS_TOKEN = "<eos>"
BOS_TOKEN = "<bos>"
UNK_TOKEN = "<unk>"
SPECIAL_TOKENS = [PAD_TOKEN, EOS_TOKEN, BOS_TOKEN, UNK_TOKEN]
# the tokenizer keywords every tiny task's tokenizer is built with
TOKENIZER_KWARGS = {
    "bos_token": BOS_TOKEN,
    "eos_token": EOS_TOKEN,
    "pad_token": PAD_TOKEN,
    "unk_token": UNK_TOKEN,
    "padding_side": "left",
}

CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"


def train_tokenizer(corpus: Iterable[str]) -> PreTrainedTokenizerFast:
    """Trains a word-level tokenizer on ``corpus`` and wraps it for ``transformers``."""
    raw = Tokenizer(models.WordLevel(unk_token=UNK_TOKEN))
    raw.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.Punctuation("isolated")]
    )
    raw.decoder = decoders.Fuse()
    trainer = trainers.WordLevelTrainer(special_tokens=SPECIAL_TOKENS, min_frequency=1)
    raw.train_from_iterator(sorted(corpus), trainer=trainer)
    return wrap_for_transformers(raw, model_max_length=64)


def wrap_for_transformers(raw: Tokenizer, **kwargs: object) -> PreTrainedTokenizerFast:
    """A trained ``tokenizers`` object as a ``transformers`` tokenizer with the tiny tasks'
    special tokens, left padding and the concatenating chat template."""
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, **TOKENIZER_KWARGS, **kwargs)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
