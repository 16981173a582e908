"""Continuous batching: sequences enter free KV-cache slots as others finish, one step at a time.

A *group* (``group.py``) is one prompt and its ``n`` samples. Its prompt is prefilled once; the
prefix cache is copied into a slot for each sample as slots free up, and kept until the last
sample got one (admission: ``admission.py``).
Every ``step`` admits waiting samples into free slots (sampling their first token from the
prompt's logits), decodes one token for every live slot, and ends sequences on a stop token, a
stop string or their length limit; the freed slot is refilled on the next step. Slots are
decoded as the contiguous range ``[0, hi)``; when the queue is empty and half the range is
holes, the live sequences are moved down. Randomness is per sequence (``rng.sequence_key``), so
a sequence's tokens do not depend on what else is in the batch.

New weights can arrive between steps (``new_weights``): every live sequence records the token
index from which the new version generates it, and ``refresh`` recomputes the KV cache of the
live sequences under the new weights (their prompt and sampled tokens re-prefilled), so they
continue as if those weights had produced their cache; their RNG streams go on where they were.

A single-sample group submitted with a ``cache_key`` keeps its finished sequence's cache under
that key (``prefix_store.py``); the next prompt submitted under the key (the caller's next turn:
the same context with more appended) prefills only the tokens after the part it shares with the
kept ones (``Decoder.extend``), which computes what a full prefill computes.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from typing import Any

import torch

from operators.rollout import dedup
from operators.rollout.admission import SlotAdmission
from operators.rollout.decoding import Decoder, prefill_chunks
from operators.rollout.group import Group, filters
from operators.rollout.kv_cache import SlotKVCache
from operators.rollout.prefix_store import Kept, PrefixStore
from operators.rollout.rng import group_key
from operators.rollout.sampling import Completion, SamplingParams, sample_rows
from operators.rollout.slot_state import SlotState
from operators.rollout.stops import StopStrings, cut_at_stop
from operators.rollout.weight_update import record_version

__all__ = ["ContinuousBatcher"]

Finished = list[tuple[int, list[Completion]]]  # (ticket, the group's completions)


class ContinuousBatcher(SlotAdmission):
    """Owns the slot KV cache and the per-slot decoding state of one model."""

    def __init__(
        self,
        decoder: Decoder,
        *,
        max_batch_size: int = 256,
        tokenizer: Any = None,
        max_prefill_tokens: int = 8192,
        deduplicate: bool = True,
        max_kept_tokens: int = 1 << 16,
    ) -> None:
        self.decoder = decoder
        self.deduplicate = deduplicate  # decode identical sequences once (dedup.py)
        self.deduplicated_rows = 0  # rows whose matmuls were skipped that way, in all
        self._next_cls = 0
        self.max_batch_size = max_batch_size
        self.tokenizer = tokenizer
        self.max_prefill_tokens = max_prefill_tokens
        self.device = decoder.device
        self.cache = SlotKVCache(
            decoder.layers, decoder.kv_heads, decoder.head_dim, dtype=decoder.dtype,
            device=self.device,
        )  # fmt: skip
        self.waiting: deque[Group] = deque()
        self.owner: list[tuple[Group, int] | None] = []
        self.stops: dict[int, StopStrings] = {}
        self.active = 0
        self._filtering = 0  # live sequences that use top-k or top-p
        self._sampling = 0  # live sequences that are not greedy
        self._siblings = 0  # live sequences of groups decoding several samples (can repeat)
        self.hi = 0  # slots [0, hi) are decoded each step
        self.busy_slot_s = 0.0  # sum over steps of (sequences decoded x step seconds)
        self._done: list[Group] = []
        self._tickets = itertools.count()
        self.s = SlotState(self.device)
        self.weight_version: str | None = None  # the weights' label; None = record no versions
        self.kept = PrefixStore(max_kept_tokens)  # finished caches by the caller's key
        self.reused_tokens = 0  # prompt tokens not prefilled again thanks to kept caches

    # ---- public API --------------------------------------------------------------------------

    def submit(
        self,
        prompt: list[int],
        params: SamplingParams,
        *,
        seed: int,
        index: int,
        stop_ids: list[int],
        cache_key: str | None = None,
    ) -> int:
        """Queue ``params.n`` samples of ``prompt``; returns the ticket ``step`` reports it under.

        Sample ``j`` draws from ``sequence_key(seed, index, j)``. Greedy groups decode one sample
        and copy it ``n`` times. With ``cache_key`` (a group that decodes one sample) the prompt
        reuses the cache kept under that key and the finished sequence's cache is kept under it.
        """
        if not prompt:
            raise ValueError("every prompt needs at least one token")
        if params.stop and self.tokenizer is None:
            raise ValueError("stop strings need a tokenizer")
        runs = 1 if params.greedy else params.n
        group = Group(
            ticket=next(self._tickets),
            prompt=list(prompt),
            params=params,
            key=group_key(seed, index),
            runs=runs,
            stop_ids=sorted(set(stop_ids)),
            filters=filters(params),
            samples=not params.greedy,
            cache_key=cache_key if runs == 1 else None,
        )
        group.results = [None] * runs
        group.versions = [[] for _ in range(runs)]
        group.unfinished = runs
        self.waiting.append(group)
        return group.ticket

    @property
    def has_work(self) -> bool:
        """True while any submitted group has not been reported by ``step``."""
        return bool(self.waiting or self.active or self._done)

    @torch.inference_mode()
    def step(self) -> Finished:
        """Admit, decode one token per live slot, and return the groups that finished."""
        start = time.perf_counter()
        self._admit()
        decoded = self.active
        if self.active:
            self._decode()
            if not self.waiting:
                self._compact()
        finished = self._report()
        self.busy_slot_s += decoded * (time.perf_counter() - start)
        return finished

    @torch.inference_mode()
    def abort_all(self) -> Finished:
        """End every live and waiting sequence now (finish reason ``abort``)."""
        for slot in range(self.hi):
            if self.owner[slot] is not None:
                n = int(self.s.count[slot])
                ids = self.s.out_tok[slot, :n].tolist()
                lps = self.s.out_lp[slot, :n].tolist()
                self._finish([(slot, ids, lps, "abort", None)])
                self.s.release(torch.tensor([slot], device=self.device))
        while self.waiting:
            group = self.waiting.popleft()
            for sample in range(group.admitted, group.runs):
                self._complete(
                    group, sample, Completion([], [], "abort", "" if self.tokenizer else None)
                )
        self._shrink()
        return self._report()

    def new_weights(self, version: str | None) -> None:
        """The decoder's model now holds new weights, labelled ``version`` (None: keep the label).

        Each live sequence records that its tokens from the next one on come from that version;
        prompt caches kept for samples not yet admitted are dropped (they are prefilled again,
        under the new weights). The live sequences' caches stay as they are until ``refresh``.
        """
        for group in self.waiting:
            group.prefix = None
        self.kept.clear()
        if version is not None:
            self.weight_version = version
        if self.weight_version is None:
            return
        counts = self.s.count[: self.hi].tolist()
        for slot, owner in enumerate(self.owner[: self.hi]):
            if owner is not None:
                group, sample = owner
                record_version(group.versions[sample], counts[slot], self.weight_version)

    def release(self, cache_key: str) -> None:
        """The caller is done with ``cache_key``: drop the cache kept under it."""
        self.kept.drop(cache_key)

    @torch.inference_mode()
    def refresh(self) -> int:
        """Recompute the KV cache of every live sequence under the current weights: its prompt
        and sampled tokens but the last (which the next decode step feeds) are prefilled again
        into its slot. Its tokens, log-probs and RNG position stay. Returns how many there were.
        """
        live = [s for s in range(self.hi) if self.owner[s] is not None]
        counts, tokens = self.s.count[live].tolist(), self.s.out_tok[live].tolist()
        sequences = [
            self.owner[slot][0].prompt + toks[: n - 1]
            for slot, n, toks in zip(live, counts, tokens, strict=True)
        ]
        for start, out in prefill_chunks(self.decoder, sequences, self.max_prefill_tokens):
            rows = len(out.lengths)
            dst = torch.tensor(live[start : start + rows], device=self.device)
            self.cache.write(dst, out.kv, torch.arange(rows, device=self.device))
        return len(live)

    # ---- decoding ----------------------------------------------------------------------------

    def _decode(self) -> None:
        """One token for every slot in ``[0, hi)``; holes compute garbage that is never kept."""
        hi = self.hi
        repeats = self.deduplicate and self._siblings > 1
        unique = dedup.plan(self.s.cls[:hi], self.s.alive[:hi]) if repeats else None
        if unique is not None:
            self.deduplicated_rows += hi - unique[0].shape[0]
        logits = self.decoder.decode(self.cache, self.s.token[:hi], self.s.pos[:hi], unique)
        self.s.pos[:hi] += self.s.alive[:hi]
        self._sample(torch.arange(hi, device=self.device), logits, contiguous=True)

    def _sample(self, rows: torch.Tensor, logits: torch.Tensor, contiguous: bool = False) -> None:
        """Sample the next token of ``rows``, record it, and finish rows that are done.

        ``contiguous`` says ``rows`` is ``0..len(rows)-1`` (the decode step): state is then read
        and written through slices (views) instead of gathers, and holes are masked out.
        """
        sel = slice(0, rows.shape[0]) if contiguous else rows
        step = self.s.count[sel]
        tokens, logprobs = sample_rows(
            logits,
            self.s.temperature[sel],
            self.s.top_k[sel],
            self.s.top_p[sel],
            self.s.unif[sel].gather(1, step.unsqueeze(-1)).squeeze(-1),
            filtering=self._filtering > 0,
            sampling=self._sampling > 0,
        )
        if contiguous:
            self.s.out_tok[sel].scatter_(1, step.unsqueeze(-1), tokens.unsqueeze(-1))
            self.s.out_lp[sel].scatter_(1, step.unsqueeze(-1), logprobs.unsqueeze(-1))
            alive = self.s.alive[sel]
            step = step + alive
        else:
            self.s.out_tok[rows, step] = tokens
            self.s.out_lp[rows, step] = logprobs
            alive = None
            step = step + 1
        self.s.count[sel] = step
        self.s.token[sel] = tokens
        if self._siblings:  # else every live class has one member: nothing to split
            self.s.cls[sel], self._next_cls = dedup.relabel(self.s.cls[sel], tokens, self._next_cls)
        hit = (self.s.stop_tab[sel] == tokens.unsqueeze(-1)).any(-1)
        done = hit | (step >= self.s.max_new[sel])
        if alive is not None:
            done &= alive
        matched: dict[int, str] = {}
        if self.stops:
            for slot, token in zip(rows.tolist(), tokens.tolist(), strict=True):
                watcher = self.stops.get(slot)
                if watcher is not None and (found := watcher.feed(token)) is not None:
                    matched[slot] = found
        if not matched and not bool(done.any()):
            return
        if matched:
            done |= torch.isin(rows, torch.tensor(list(matched), device=self.device))
        idx = done.nonzero().squeeze(-1)
        slots = rows[idx]
        ends = []
        toks, lps = self.s.out_tok[slots].tolist(), self.s.out_lp[slots].tolist()
        info = zip(
            slots.tolist(), step[idx].tolist(), hit[idx].tolist(), tokens[idx].tolist(), strict=True
        )
        for i, (slot, n, by_token, token) in enumerate(info):
            if by_token:
                reason, why = "stop", token
            elif slot in matched:
                reason, why = "stop", matched[slot]
            else:
                reason, why = "length", None
            ends.append((slot, toks[i][:n], lps[i][:n], reason, why))
        self._finish(ends)
        self.s.release(slots)
        self._shrink()

    def _finish(self, ends: list[tuple[int, list[int], list[float], str, Any]]) -> None:
        """Free the slots of ended sequences and complete them (texts decoded in one batch)."""
        texts: list[str | None] = [None] * len(ends)
        if self.tokenizer is not None:
            ids = [end[1] for end in ends]
            texts = self.tokenizer.batch_decode(ids, skip_special_tokens=True)
        owner, stops = self.owner, self.stops
        self.active -= len(ends)
        for (slot, ids, lps, reason, matched), text in zip(ends, texts, strict=True):
            group, sample = owner[slot]
            if group.cache_key is not None and reason != "abort" and ids:
                self._keep(group, slot, ids)
            owner[slot] = None
            self._filtering -= group.filters
            self._sampling -= group.samples
            self._siblings -= group.runs > 1
            if stops:
                stops.pop(slot, None)
            if isinstance(matched, str):
                text = cut_at_stop(text, group.params.stop)
            versions = tuple(group.versions[sample])
            done = Completion(ids, lps, reason, text, matched, versions, group.cached_tokens)
            self._complete(group, sample, done)

    def _keep(self, group: Group, slot: int, ids: list[int]) -> None:
        """Keep the cache of a finished sequence: its prompt and tokens but the last (the one
        never fed), under the group's key."""
        tokens = group.prompt + ids[:-1]
        kv = [layer[:, : len(tokens), slot].transpose(0, 1).clone() for layer in self.cache.kv]
        self.kept.keep(group.cache_key, Kept(tokens, kv))

    def _complete(self, group: Group, sample: int, completion: Completion) -> None:
        group.results[sample] = completion
        group.unfinished -= 1
        if group.unfinished == 0:
            self._done.append(group)

    def _shrink(self) -> None:
        while self.hi and self.owner[self.hi - 1] is None:
            self.hi -= 1

    def _compact(self) -> None:
        """Move live sequences from the top of ``[0, hi)`` into holes when half of it is empty."""
        if self.hi < 16 or self.active > self.hi // 2:
            return
        holes = [s for s in range(self.hi) if self.owner[s] is None]
        live = [s for s in range(self.hi - 1, -1, -1) if self.owner[s] is not None]
        pairs = [(src, dst) for src, dst in zip(live, holes, strict=False) if dst < src]
        if not pairs:
            return
        src = torch.tensor([s for s, _ in pairs], device=self.device)
        dst = torch.tensor([d for _, d in pairs], device=self.device)
        self.cache.move(src, dst, int(self.s.pos[src].max()) + 1)
        self.s.move(src, dst)
        for s, d in pairs:
            self.owner[d], self.owner[s] = self.owner[s], None
            if s in self.stops:
                self.stops[d] = self.stops.pop(s)
        self._shrink()

    def _report(self) -> Finished:
        done, self._done = self._done, []
        return [(group.ticket, group.completions()) for group in done]
