"""What a weight update does to requests in flight, and the weight versions a response saw.

``InFlight`` names the behaviours of ``/update_weights_from_disk``: ``finish`` every
earlier request under the old weights first (the default), ``abort`` them (SGLang's
``abort_all_requests``), ``retract`` them (SGLang's ``/pause_generation`` mode of that name):
stop at a step boundary, load the new weights, and continue every interrupted sequence under
them by re-prefilling its prompt and the tokens it already sampled, or ``keep`` them: load at
the next step boundary and continue every sequence on the cache it has (partial rollouts as
PipelineRL runs them; SGLang's ``in_place`` pause mode), no token recomputed.

A response that spans updates records its versions as *starts*: ``(first token index,
version)`` pairs, oldest first, so token ``t`` came from the last version whose start is
``<= t``.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["InFlight", "PauseMode", "VersionStarts", "record_version"]

VersionStarts = list[tuple[int, str]]


class InFlight(StrEnum):
    """What happens to requests in flight when new weights arrive."""

    finish = "finish"  # complete them under the old weights, then load
    abort = "abort"  # end them now (finish reason abort), then load
    retract = "retract"  # stop, load, re-prefill prompt + partial output, continue
    keep = "keep"  # load between two steps, continue on the caches as they are


class PauseMode(StrEnum):
    """SGLang's ``/pause_generation`` modes: what pausing does to requests in flight."""

    abort = "abort"  # end them (finish reason abort)
    retract = "retract"  # hold them; recompute their caches on continue
    in_place = "in_place"  # hold them with their caches as they are


def record_version(starts: VersionStarts, index: int, version: str) -> None:
    """Note in ``starts`` that tokens from ``index`` on come from ``version``.

    Nothing changes when the newest start already has ``version``; a start at the same index
    (no token came from it) is replaced, merging with the one before when they agree.
    """
    if starts and starts[-1][1] == version:
        return
    if starts and starts[-1][0] == index:
        starts.pop()
        if starts and starts[-1][1] == version:
            return
    starts.append((index, version))
