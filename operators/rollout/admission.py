"""Admission in the continuous batcher: waiting samples enter free KV-cache slots.

Mixed into ``ContinuousBatcher`` (its queue, cache, slot state and owners): each step pairs
waiting samples with free slots (FIFO), prefills the prompts not prefilled yet (a prompt that
shares tokens with the cache kept under its key prefills only the rest, ``prefix_store.py``),
copies each prompt's cache into its samples' slots and samples their first tokens.
"""

from __future__ import annotations

import torch

from operators.rollout.decoding import Prefill, prefill_chunks
from operators.rollout.group import Group
from operators.rollout.prefix_store import shared_prefix
from operators.rollout.stops import StopStrings

__all__ = ["SlotAdmission"]


class SlotAdmission:
    """The admission half of ``ContinuousBatcher``."""

    def _plan(self) -> list[tuple[Group, list[int]]]:
        """Waiting samples (FIFO) paired with free slots, growing the cache to fit them."""
        pending = sum(g.runs - g.admitted for g in self.waiting)
        slots = min(self.max_batch_size, self.active + pending)
        need = max(len(g.prompt) + g.params.max_new_tokens for g in self.waiting)
        self.cache.ensure(slots, need + 1)
        width = max(len(g.stop_ids) for g in self.waiting)
        max_new = max(g.params.max_new_tokens for g in self.waiting)
        self.s.grow(self.cache.slots, max_new, max(width, 1))
        self.owner += [None] * (self.s.slots - len(self.owner))
        limit = min(self.max_batch_size, self.cache.slots)
        free = [s for s in range(limit) if self.owner[s] is None]
        plan, used = [], 0
        for group in self.waiting:
            take = min(group.runs - group.admitted, len(free) - used)
            if take <= 0:
                break
            plan.append((group, free[used : used + take]))
            used += take
        return plan

    def _prefill(self, groups: list[Group]) -> None:
        """Prefill the prompts of ``groups`` (in token-bounded chunks) and keep each prefix; a
        prompt that shares tokens with the cache kept under its key prefills only the rest."""
        fresh, extended, pasts = [], [], []
        for group in groups:
            kept = self.kept.take(group.cache_key) if group.cache_key is not None else None
            reuse = 0 if kept is None else shared_prefix(kept.tokens, group.prompt)
            reuse = min(reuse, len(group.prompt) - 1)  # the last token gives the logits
            if reuse > 0:
                extended.append(group)
                pasts.append([kv[:reuse] for kv in kept.kv])
                self.reused_tokens += reuse
                group.cached_tokens = reuse
            else:
                fresh.append(group)
        suffixes = [g.prompt[p[0].shape[0] :] for g, p in zip(extended, pasts, strict=True)]
        for batch, sequences, past in ((fresh, [g.prompt for g in fresh], None),
                                       (extended, suffixes, pasts)):  # fmt: skip
            for start, out in prefill_chunks(
                self.decoder, sequences, self.max_prefill_tokens, past
            ):
                for row in range(len(out.lengths)):
                    batch[start + row].prefix = (out, row)

    def _admit(self) -> None:
        if not self.waiting or self.active >= self.max_batch_size:
            return
        plan = self._plan()
        if not plan:
            return
        self._prefill([g for g, _ in plan if g.prefix is None])
        slots: list[int] = []
        rows: dict[int, tuple[Prefill, list[int], list[int]]] = {}  # by prefill: rows, slots
        per_row: dict[str, list] = {k: [] for k in ("pos", "temp", "top_k", "top_p", "max_new")}
        per_row |= {"key": [], "sample": [], "stop": [], "cls": []}
        for group, group_slots in plan:
            p, (prefill, row), take = group.params, group.prefix, len(group_slots)
            entry = rows.setdefault(id(prefill), (prefill, [], []))
            entry[1].extend([row] * take)
            entry[2].extend(group_slots)
            slots += group_slots
            for name, value in (
                ("pos", len(group.prompt)), ("temp", p.temperature), ("top_k", p.top_k),
                ("top_p", p.top_p), ("max_new", p.max_new_tokens), ("key", group.key),
                ("stop", group.stop_ids),
            ):  # fmt: skip
                per_row[name] += [value] * take
            per_row["sample"] += range(group.admitted, group.admitted + take)
            per_row["cls"] += [self._next_cls] * take  # same prompt, nothing drawn yet
            self._next_cls += 1
            for j, slot in enumerate(group_slots):
                self.owner[slot] = (group, group.admitted + j)
                if self.weight_version is not None:
                    group.versions[group.admitted + j] = [(0, self.weight_version)]
                if p.stop:
                    self.stops[slot] = StopStrings(self.tokenizer, p.stop)
            self._filtering += take * group.filters
            self._sampling += take * group.samples
            self._siblings += take * (group.runs > 1)
            group.admitted += take
            if group.admitted == group.runs:
                group.prefix = None
        while self.waiting and self.waiting[0].admitted == self.waiting[0].runs:
            self.waiting.popleft()
        self.active += len(slots)
        self.hi = max(self.hi, max(slots) + 1)
        logits = [self._write_prefixes(*entry) for entry in rows.values()]
        order = [s for _, _, group_slots in rows.values() for s in group_slots]
        self.s.admit(slots, per_row)
        self._sample(torch.tensor(order, device=self.device), torch.cat(logits))

    def _write_prefixes(self, prefill: Prefill, rows: list[int], slots: list[int]):
        """Copy prompt caches (rows of one prefill batch) into slots; their next-token logits."""
        src = torch.tensor(rows, device=self.device)
        dst = torch.tensor(slots, device=self.device)
        width = max(prefill.lengths[r] for r in set(rows))
        self.cache.write(dst, [kv[:, :width] for kv in prefill.kv], src)
        return prefill.logits[src]
