"""Batched KV-cache rollout engine on plain torch + Hugging Face causal LMs.

Each chunk of work (at most ``max_batch_size`` sequences) is prefilled once per distinct prompt
(left-padded, with matching ``attention_mask`` / ``position_ids``); the prompt's KV cache is then
repeated for its samples, so a GRPO group shares one prefill. Decoding feeds one token per step
through the model's ``DynamicCache``; sequences that finish are dropped from the batch (cache,
mask and positions are compacted), and the chunk ends when none is left.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import torch
from transformers import AutoTokenizer, DynamicCache

from operators.hf import load_causal_lm
from operators.rollout.sampling import Completion, SamplingParams, select_next_tokens

__all__ = ["TorchEngine"]

_ENGINE_KWARGS = ("max_batch_size",)
_STATE_PREFIXES = ("module.", "_orig_mod.")


def _as_id_list(value: Any) -> list[int]:
    """Normalise an eos id field (None, int or list of ints) to a list."""
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


def _plan_chunks(order: list[int], n: int, max_batch_size: int) -> Iterator[list[tuple[int, int]]]:
    """Pack ``n`` samples of each prompt (in ``order``) into chunks of ``(prompt, count)`` items.

    A chunk holds at most ``max_batch_size`` sequences; a prompt's group may span two chunks.
    """
    chunk: list[tuple[int, int]] = []
    room = max_batch_size
    for idx in order:
        left = n
        while left:
            take = min(left, room)
            chunk.append((idx, take))
            left -= take
            room -= take
            if room == 0:
                yield chunk
                chunk, room = [], max_batch_size
    if chunk:
        yield chunk


class TorchEngine:
    """Generate completions with a Hugging Face causal LM, batched, with a KV cache."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any = None,
        *,
        device: str = "cpu",
        max_batch_size: int = 256,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size

    @classmethod
    def from_pretrained(
        cls, path: str, *, device: str = "cpu", dtype: torch.dtype = torch.float32, **kw: Any
    ) -> TorchEngine:
        """Load model (and tokenizer, if ``path`` has one) from a local dir or hub id.

        ``max_batch_size`` in ``kw`` goes to the engine; other keywords go to
        ``AutoModelForCausalLM.from_pretrained`` (e.g. ``attn_implementation``).
        """
        engine_kw = {k: kw.pop(k) for k in _ENGINE_KWARGS if k in kw}
        model = load_causal_lm(path, dtype=dtype, **kw)
        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError):
            tokenizer = None
        return cls(model, tokenizer, device=device, **engine_kw)

    @property
    def eos_token_ids(self) -> list[int]:
        """Token ids that end a sequence: the generation config's and the tokenizer's eos."""
        ids = _as_id_list(
            getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        )
        ids += _as_id_list(getattr(self.tokenizer, "eos_token_id", None))
        return sorted(set(ids))

    @property
    def pad_token_id(self) -> int:
        """Filler id for left padding (masked out, so any valid id works)."""
        for source in (self.tokenizer, getattr(self.model, "generation_config", None)):
            pad = getattr(source, "pad_token_id", None)
            if isinstance(pad, int):
                return pad
        return 0

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The model's state dict (tensors share storage with the live weights)."""
        return self.model.state_dict()

    @torch.no_grad()
    def load_state_dict(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Copy weights in place (any device/dtype); a subset of the keys updates only those.

        Keys may carry a ``module.`` (DDP) or ``_orig_mod.`` (torch.compile) prefix.
        """
        own = self.model.state_dict()
        for name, tensor in state_dict.items():
            key = name
            while key not in own and key.startswith(_STATE_PREFIXES):
                key = key.split(".", 1)[1]
            if key not in own:
                raise KeyError(f"unexpected key in state_dict: {name!r}")
            if own[key].shape != tensor.shape:
                raise ValueError(
                    f"shape mismatch for {name!r}: {tuple(tensor.shape)} vs model's "
                    f"{tuple(own[key].shape)}"
                )
            own[key].copy_(tensor)

    def generate(
        self, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Completion]]:
        """Sample ``params.n`` completions per prompt; returns one list per prompt, in order."""
        if any(len(p) == 0 for p in prompt_ids):
            raise ValueError("every prompt needs at least one token")
        if params.stop and self.tokenizer is None:
            raise ValueError("stop strings need a tokenizer")
        generator = torch.Generator(device=self.device)
        if params.seed is None:
            generator.seed()
        else:
            generator.manual_seed(params.seed)
        # Greedy samples of one prompt are identical: decode one and copy it.
        n = 1 if params.greedy else params.n
        stop_ids = torch.tensor(
            sorted(set(self.eos_token_ids) | set(params.stop_token_ids)),
            dtype=torch.long,
            device=self.device,
        )
        # Similar lengths share a chunk (less padding); results are put back in prompt order.
        order = sorted(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]))
        results: list[list[Completion]] = [[] for _ in prompt_ids]
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                for chunk in _plan_chunks(order, n, self.max_batch_size):
                    prompts = [prompt_ids[i] for i, _ in chunk]
                    counts = [c for _, c in chunk]
                    groups = self._generate_chunk(prompts, counts, params, generator, stop_ids)
                    for (i, _), group in zip(chunk, groups, strict=True):
                        results[i].extend(group)
        finally:
            self.model.train(was_training)
        if n != params.n:
            results = [
                [
                    dataclasses.replace(c, token_ids=list(c.token_ids), logprobs=list(c.logprobs))
                    for c in group
                    for _ in range(params.n)
                ]
                for group in results
            ]
        return results

    def _forward(self, **inputs: Any) -> torch.Tensor:
        """Run the model on the cache and return float32 logits of the last position."""
        out = self.model(**inputs, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1, :].float()

    def _generate_chunk(
        self,
        prompts: list[list[int]],
        counts: list[int],
        params: SamplingParams,
        generator: torch.Generator,
        stop_ids: torch.Tensor,
    ) -> list[list[Completion]]:
        """Prefill ``prompts`` once, repeat each ``counts[i]`` times, decode until all finish."""
        dev = self.device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            mask[row, width - len(prompt) :] = 1
        input_ids, mask = input_ids.to(dev), mask.to(dev)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.model.config)
        logits = self._forward(
            input_ids=input_ids, attention_mask=mask, position_ids=positions, past_key_values=cache
        )
        if any(c != 1 for c in counts):
            rows = torch.repeat_interleave(torch.arange(len(prompts)), torch.tensor(counts)).to(dev)
            cache.batch_select_indices(rows)
            mask, positions, logits = mask[rows], positions[rows], logits[rows]
        next_pos = positions[:, -1:] + 1

        total, max_new = sum(counts), params.max_new_tokens
        tok_buf = torch.zeros((total, max_new), dtype=torch.long, device=dev)
        lp_buf = torch.zeros((total, max_new), dtype=torch.float32, device=dev)
        lengths = [max_new] * total
        reasons = ["length"] * total
        alive = torch.arange(total, device=dev)  # buffer rows of the sequences still decoding
        alive_rows = list(range(total))
        texts = _StopStrings(self.tokenizer, params.stop, total) if params.stop else None
        for step in range(max_new):
            tokens, logprobs = select_next_tokens(logits, params, generator)
            tok_buf[alive, step] = tokens
            lp_buf[alive, step] = logprobs
            done = torch.isin(tokens, stop_ids)
            if texts is not None:
                done |= texts.update(alive_rows, tokens.tolist(), dev)
            last = step == max_new - 1
            finished = done.tolist() if last or bool(done.any()) else None  # one sync per step
            if finished is not None:
                for row, fin in zip(alive_rows, finished, strict=True):
                    if fin:
                        lengths[row], reasons[row] = step + 1, "stop"
            if last:
                break
            if finished is not None:
                keep = (~done).nonzero().squeeze(-1)
                if keep.numel() == 0:
                    break
                alive_rows = [r for r, fin in zip(alive_rows, finished, strict=True) if not fin]
                alive, tokens = alive[keep], tokens[keep]
                mask, next_pos = mask[keep], next_pos[keep]
                cache.batch_select_indices(keep)
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
            logits = self._forward(
                input_ids=tokens.unsqueeze(-1),
                attention_mask=mask,
                position_ids=next_pos,
                past_key_values=cache,
            )
            next_pos = next_pos + 1

        tok_rows, lp_rows = tok_buf.tolist(), lp_buf.tolist()
        completions: list[Completion] = []
        for row in range(total):
            ids = tok_rows[row][: lengths[row]]
            text = None
            if self.tokenizer is not None:
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                if texts is not None and reasons[row] == "stop":
                    text = texts.cut(text)
            completions.append(Completion(ids, lp_rows[row][: lengths[row]], reasons[row], text))
        groups, start = [], 0
        for count in counts:
            groups.append(completions[start : start + count])
            start += count
        return groups


class _StopStrings:
    """Incremental stop-string detection: decodes only the tail of each sequence per step."""

    def __init__(self, tokenizer: Any, stop: tuple[str, ...], rows: int) -> None:
        self.tokenizer = tokenizer
        self.stop = stop
        # Enough tokens to cover the longest stop string even with byte-level pieces.
        self.window = 4 * max(len(s) for s in stop) + 4
        self.tokens: list[list[int]] = [[] for _ in range(rows)]

    def update(self, rows: list[int], new_tokens: list[int], device: torch.device) -> torch.Tensor:
        """Append one token per alive row; True where the tail text now contains a stop string."""
        hits = []
        for row, token in zip(rows, new_tokens, strict=True):
            seq = self.tokens[row]
            seq.append(token)
            tail = self.tokenizer.decode(seq[-self.window :], skip_special_tokens=True)
            hits.append(any(s in tail for s in self.stop))
        return torch.tensor(hits, dtype=torch.bool, device=device)

    def cut(self, text: str) -> str:
        """Text before the earliest stop string (unchanged if none occurs)."""
        found = [i for i in (text.find(s) for s in self.stop) if i >= 0]
        return text[: min(found)] if found else text
