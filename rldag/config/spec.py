"""pipeline.yaml -> a validated, resolved PipelineSpec (OmegaConf structured configs).

Every key has a type and a default; unknown keys, wrong types and missing values raise
SpecError naming the file and the key path. Overrides are OmegaConf dotlist strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rldag.config.errors import SpecError
from rldag.config.faults import FaultsSpec, check_faults
from rldag.config.model_paths import check_model_path
from rldag.config.tracking import TrackerName, TrackingSpec, check_trackers
from rldag.config.weights import WeightsSpec, check_weights


class NodeKind(StrEnum):
    """What a node does; decides its default pool and its Prefect task."""

    source = "source"
    generate = "generate"
    sandbox = "sandbox"
    score = "score"
    transform = "transform"
    train = "train"


class PoolName(StrEnum):
    """The standard pools (users may declare more under `pools.<name>`)."""

    driver = "driver"
    rollout = "rollout"
    environment = "environment"
    training = "training"


DEFAULT_POOL = {
    NodeKind.generate: PoolName.rollout,
    NodeKind.sandbox: PoolName.environment,
    NodeKind.train: PoolName.training,
}


@dataclass
class NodeSpec:
    """One node of the pipeline graph."""

    kind: NodeKind = MISSING  # generate | sandbox | score | train | source | transform
    op: str = MISSING  # a registered operator name, or module:function for user code
    pool: str | None = None  # driver or a pool of `pools:`; by kind: generate->rollout, ...
    inputs: dict[str, str] = field(default_factory=dict)  # port -> upstream node name
    params: dict[str, Any] = field(default_factory=dict)  # operator parameters
    persist: bool | None = None  # store this node's table as Parquet (default: storage.persist)

    @property
    def resolved_pool(self) -> str:
        """The pool the node runs on: explicit, else by kind, else the driver."""
        return self.pool or DEFAULT_POOL.get(self.kind, PoolName.driver)


@dataclass
class StorageSpec:
    """Where edge tables, metrics and checkpoints go."""

    uri: str = "file://./runs"  # file://path, a plain path, or s3://bucket/prefix
    persist: bool = True  # persist every edge table unless a node says otherwise
    endpoint_url: str | None = None  # s3: an S3-compatible server; default AWS_ENDPOINT_URL/AWS
    options: dict[str, Any] = field(default_factory=dict)  # more fsspec/s3fs options (anon, ...)
    lock_lease_s: float = 60.0  # a run's lock without a heartbeat this long is stale (run_lock)


class PlacementStrategy(StrEnum):
    """How Ray places a pool's bundles over nodes (Ray placement group strategies)."""

    PACK = "PACK"
    SPREAD = "SPREAD"
    STRICT_PACK = "STRICT_PACK"
    STRICT_SPREAD = "STRICT_SPREAD"


@dataclass
class PoolSpec:
    """A resource pool: a group of identical Ray worker actors, one bundle each."""

    workers: int = 1  # worker actors (one placement-group bundle each)
    cpus_per_worker: float = 1.0  # CPUs each worker's bundle reserves
    gpus_per_worker: float = 0.0  # fractions allowed; logical GPUs work on CPU machines
    strategy: PlacementStrategy = PlacementStrategy.PACK  # STRICT_PACK: all on one node
    max_concurrency: int = 0  # environment: max concurrent executions (0 = no bound)


STANDARD_POOLS = (PoolName.training, PoolName.rollout, PoolName.environment)


@dataclass
class PoolsSpec:
    """The pools by name and which of them share bundles (HybridFlow's colocation).

    pipeline.yaml writes each pool as `pools.<name>`; they are held in `named` (see
    `_to_fields`). The standard three exist by default; users may declare more."""

    # `pools.<name>`: each pool by name (training, rollout and environment exist by default)
    named: dict[str, PoolSpec] = field(
        default_factory=lambda: {str(name): PoolSpec() for name in STANDARD_POOLS}
    )
    # pools that share their bundles (one worker process holds both nodes: an in-process
    # weights edge)
    colocate: list[list[str]] = field(default_factory=lambda: [["training", "rollout"]])


@dataclass
class RaySpec:
    """Where the pools run."""

    enabled: bool = True  # false: every pool in the driver process (debugging)
    address: str | None = None  # None: start an embedded local Ray; "auto" or ray://host:port
    num_cpus: int | None = None  # embedded Ray only: CPUs to declare (default: all)
    num_gpus: int | None = None  # embedded Ray only: GPUs to declare (logical ones allowed)


@dataclass
class CheckpointSpec:
    """When trainers save their state (for `rldag run --resume`) and export the policy."""

    every: int = 0  # checkpoint every N iterations and after the last (0: never)
    export_hf: bool = True  # save the final policy as a Hugging Face directory <run>/hf/<node>


class AsyncMode(StrEnum):
    """How generation runs ahead of training when k > 0 (docs/guides/async.md)."""

    iteration = "iteration"  # whole generate steps: step i starts after step i-1 finished
    continuous = "continuous"  # one engine, always full: iteration i+1's prompts take the
    # slots iteration i's finished sequences free; new weights land mid-sequence


@dataclass
class AsyncSpec:
    """How far generation runs ahead of training (`async:` in pipeline.yaml), and how edges
    stream."""

    max_staleness: int = 0  # k: generate of iteration i uses policy version i - k; 0 = sync
    mode: AsyncMode = AsyncMode.iteration  # with k > 0: iteration | continuous
    chunk_groups: int = 8  # prompt groups per streamed chunk (0: whole tables, no streaming)


@dataclass
class ModelSpec:
    """The policy model; node params refer to it as ${model.path}."""

    path: str = MISSING  # a Hugging Face model directory (from_pretrained)


@dataclass
class PipelineSpec:
    """The whole pipeline.yaml."""

    name: str = "pipeline"  # shown in run ids and the Prefect UI
    iterations: int = 1  # RL iterations to run
    seed: int = 0  # seeds sampling, shuffling and initialisation
    model: ModelSpec = field(default_factory=ModelSpec)  # the policy model
    storage: StorageSpec = field(default_factory=StorageSpec)  # where tables and checkpoints go
    checkpoint: CheckpointSpec = field(default_factory=CheckpointSpec)  # when trainers save
    async_: AsyncSpec = field(default_factory=AsyncSpec)  # `async:` (a Python keyword)
    ray: RaySpec = field(default_factory=RaySpec)  # where the pools run
    pools: PoolsSpec = field(default_factory=PoolsSpec)  # resource pools and colocation
    nodes: dict[str, NodeSpec] = field(default_factory=dict)  # the graph: node name -> node
    trackers: list[TrackerName] = field(default_factory=list)  # mlflow, tensorboard, wandb
    tracking: TrackingSpec = field(default_factory=lambda: TrackingSpec())  # their options
    weights: WeightsSpec = field(default_factory=WeightsSpec)  # split weights edge
    faults: FaultsSpec = field(default_factory=lambda: FaultsSpec())  # worker restarts


@dataclass
class LoadedPipeline:
    """A validated spec plus its resolved YAML text (stored with every run)."""

    spec: PipelineSpec
    resolved_yaml: str
    source: str


# `async` is a Python keyword: pipeline.yaml's `async:` is the spec's `async_` field.
YAML_KEYS = {"async": "async_"}


# `pools.<name>` in pipeline.yaml is `pools.named.<name>` in the spec; `pools.colocate` stays.
POOL_KEYS = ("colocate",)


_FIELD_REFERENCE = re.compile(r"\$\{(async|pools)\.([A-Za-z_][\w-]*)")


def _field_reference(match: re.Match[str]) -> str:
    """`${async.k}` -> `${async_.k}`, `${pools.<name>...}` -> `${pools.named.<name>...}`."""
    root, key = match.groups()
    if root == "async":
        return "${async_." + key
    return match.group(0) if key in POOL_KEYS else "${pools.named." + key


def _rewrite_references(value: Any) -> Any:
    if isinstance(value, str):
        return _FIELD_REFERENCE.sub(_field_reference, value)
    if isinstance(value, dict):
        return {k: _rewrite_references(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rewrite_references(v) for v in value]
    return value


def _to_fields(cfg: DictConfig) -> DictConfig:
    """The YAML's keys as the dataclasses' fields (`async` -> `async_`, `pools.<name>` ->
    `pools.named.<name>`), interpolations that point at them included."""
    raw = _rewrite_references(OmegaConf.to_container(cfg, resolve=False))
    for key, name in YAML_KEYS.items():
        if key in raw:
            raw[name] = raw.pop(key)
    pools = raw.get("pools")
    if isinstance(pools, dict):
        fixed = {k: pools.pop(k) for k in POOL_KEYS if k in pools}
        raw["pools"] = {**fixed, "named": pools} if pools else fixed
    return OmegaConf.create(raw)


def _to_yaml_key(path: str) -> str:
    for key, name in YAML_KEYS.items():
        if path == name or path.startswith(name + "."):
            return key + path[len(name) :]
    return path.replace("pools.named.", "pools.", 1)


def _to_yaml(merged: DictConfig) -> str:
    """The resolved pipeline as pipeline.yaml writes it (`async:`, `pools.<name>`)."""
    doc = OmegaConf.to_container(merged)
    assert isinstance(doc, dict)
    doc["pools"] = {**doc["pools"].pop("named"), **doc["pools"]}
    text = OmegaConf.to_yaml(OmegaConf.create(doc))
    for key, name in YAML_KEYS.items():
        text = text.replace(f"\n{name}:", f"\n{key}:")
    return text


def _spec_error(err: OmegaConfBaseException, where: str, prefix: str = "") -> SpecError:
    key = _to_yaml_key(getattr(err, "full_key", "") or "")
    message = str(getattr(err, "msg", "") or err).splitlines()[0]
    path = ".".join(p for p in (prefix, key) if p)
    return SpecError(message, path=path, where=where)


def _load_yaml(path: Path) -> DictConfig:
    if not path.is_file():
        raise SpecError(f"pipeline file not found: {path}", where=str(path))
    try:
        cfg = OmegaConf.load(path)
    except yaml.YAMLError as err:
        raise SpecError(f"not valid YAML: {err}".replace("\n", " "), where=str(path)) from None
    except OmegaConfBaseException as err:
        raise _spec_error(err, str(path)) from None
    if not isinstance(cfg, DictConfig):
        raise SpecError("the top level must be a mapping of keys", where=str(path))
    return cfg


def _parse_overrides(overrides: list[str]) -> DictConfig:
    for item in overrides:
        if "=" not in item:
            raise SpecError(f"override {item!r} is not key=value", where="command line")
    try:
        return OmegaConf.from_dotlist(list(overrides))
    except OmegaConfBaseException as err:
        raise _spec_error(err, "command line") from None


def merge_params(schema_type: type, params: dict[str, Any], where: str, prefix: str) -> Any:
    """Validate an operator's params against its dataclass; errors name ``prefix.<key>``."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema_type), params)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        raise _spec_error(err, where, prefix) from None
    except SpecError as err:  # raised by a params dataclass's __post_init__ checks
        raise SpecError(err.message, path=f"{prefix}.{err.path}", where=where) from None


def check_choice(key: str, value: object, allowed: tuple[object, ...]) -> None:
    """For params dataclasses' __post_init__: `value` must be one of `allowed`."""
    if value not in allowed:
        options = ", ".join(str(a) for a in allowed)
        raise SpecError(f"expected one of [{options}], got {value!r}", path=key)


def check_positive(key: str, value: float, *, allow_zero: bool = False) -> None:
    """For params dataclasses' __post_init__: `value` must be > 0 (or >= 0)."""
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise SpecError(f"must be {bound}, got {value!r}", path=key)


def load_pipeline(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> LoadedPipeline:
    """Read, merge overrides into, type-check and resolve a pipeline file."""
    path = Path(path)
    where = str(path)
    raw = _to_fields(_load_yaml(path))
    extra = _to_fields(_parse_overrides(list(overrides)))
    try:
        merged = OmegaConf.merge(OmegaConf.structured(PipelineSpec), OmegaConf.merge(raw, extra))
        OmegaConf.resolve(merged)
        spec = OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        raise _spec_error(err, where) from None
    assert isinstance(spec, PipelineSpec)
    _check_values(spec, where)
    return LoadedPipeline(spec=spec, resolved_yaml=_to_yaml(merged), source=where)


def _check_values(spec: PipelineSpec, where: str) -> None:
    if spec.iterations < 1:
        raise SpecError(f"must be >= 1, got {spec.iterations}", path="iterations", where=where)
    if not spec.nodes:
        raise SpecError("the pipeline has no nodes", path="nodes", where=where)
    for key in ("max_staleness", "chunk_groups"):
        value = getattr(spec.async_, key)
        if value < 0:
            raise SpecError(f"must be >= 0, got {value}", path=f"async.{key}", where=where)
    if spec.async_.mode is AsyncMode.continuous and spec.async_.max_staleness == 0:
        raise SpecError(
            "continuous generation overlaps iterations, so it needs async.max_staleness >= 1 "
            "(k = 0 is the synchronous loop)",
            path="async.mode",
            where=where,
        )
    check_model_path(spec.model.path, "model.path", where)
    check_trackers(spec.trackers, where)
    check_weights(spec.weights, where)
    _check_pools(spec, where)
    check_faults(spec.faults, where)


def _check_pools(spec: PipelineSpec, where: str) -> None:
    """`driver` is where unpooled nodes run, not a pool; every node's pool must exist."""
    pools = spec.pools.named
    if PoolName.driver in pools:
        message = "'driver' is not a pool (nodes without one run there)"
        raise SpecError(message, path="pools.driver", where=where)
    for name, pool in pools.items():
        if pool.workers < 1:
            raise SpecError(
                f"must be >= 1, got {pool.workers}: a pool runs its nodes on this many worker "
                f"actors (leave pools.{name}.workers out for the default of 1)",
                path=f"pools.{name}.workers",
                where=where,
            )
        for key in ("cpus_per_worker", "gpus_per_worker", "max_concurrency"):
            if (value := getattr(pool, key)) < 0:
                message = f"must be >= 0, got {value}"
                raise SpecError(message, path=f"pools.{name}.{key}", where=where)
    for name, node in spec.nodes.items():
        if node.pool not in (None, PoolName.driver, *pools):
            known = ", ".join([PoolName.driver, *pools])
            raise SpecError(
                f"unknown pool {node.pool!r} (pools: {known}; declare it as pools.{node.pool})",
                path=f"nodes.{name}.pool",
                where=where,
            )
    used = {n.pool for n in spec.nodes.values()} | {p for s in spec.pools.colocate for p in s}
    for name in pools:
        if name not in STANDARD_POOLS and name not in used:  # most likely a typo
            raise SpecError(
                f"pool {name!r} is declared but no node runs on it (pools: {', '.join(pools)}; "
                f"put a node on it with nodes.<node>.pool: {name})",
                path=f"pools.{name}",
                where=where,
            )
