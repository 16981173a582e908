"""Attested weights: after a weights edge loads a policy version into a node's workers, each
worker's digest of the weights it serves must equal the trainer's digest of that version
(digests are computed by the operators: operators/model/weights_digest.py). A worker that kept
its old weights, an adapter left unmerged or a bucket that arrived short stops the run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rldag.config.errors import WeightsMismatch
from rldag.graph.dag import Node

if TYPE_CHECKING:  # annotations only (handles -> worker -> this package)
    from rldag.compute.handles import WorkerHandle


def check_loaded(target: Node, version: int, expected: str, loaded: Mapping[str, str]) -> None:
    """Raise WeightsMismatch naming the first worker of `target` (by name in `loaded`) whose
    digest is not `expected`; "" on either side is a digest nobody computed (not checked)."""
    for worker, digest in loaded.items():
        if expected and digest and digest != expected:
            raise WeightsMismatch(
                f"node '{target.name}': rollout worker {worker} loaded policy version {version} "
                f"with weights digest {digest}, but the trainer published {expected} for that "
                "version; it does not serve the policy it acknowledged"
            )


Get = Callable[[Any, str], Any]  # ray.get of refs within a deadline, naming what it waits for


def trainer_digest(workers: Sequence[WorkerHandle], node: Node, get: Get) -> str:
    """A Ray worker group's trainer's digest of the policy it holds now (every rank is asked:
    a sharded trainer gathers its weights for it); rank 0's."""
    return get([w.weights_digest.remote(node) for w in workers], f"{node.name}'s digest")[0]


def attest_group(
    group: str, workers: Sequence[WorkerHandle], target: Node, version: int, expected: str,
    get: Get,
) -> None:  # fmt: skip
    """Every Ray worker of `target`'s group serves `version` (check_loaded)."""
    loaded = get([w.weights_digest.remote(target) for w in workers], f"{target.name}'s digest")
    check_loaded(target, version, expected, {f"{group}[{r}]": d for r, d in enumerate(loaded)})
