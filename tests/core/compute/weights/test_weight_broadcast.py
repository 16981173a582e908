"""The weight broadcast group: one sender and two receivers in separate processes get every
tensor bit for bit (fp32, bf16, fp16, int64, 0-d, non-contiguous; a model with tied
embeddings), through shared memory and through gloo's sockets, beside a default process
group that it leaves alone; and the bucket plan groups, bounds and de-duplicates tensors."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from rldag.compute.weights.buckets import Bucket, flatten_into, plan_buckets, unflatten
from rldag.compute.weights.shared_buckets import has_room
from tests.support.gloo_ranks import forkserver

RECEIVERS = 2
MODES = {"shared_memory": True, "sockets": False}
SMALL_BUCKET = 4096  # bytes: the mixed dict needs several buckets per dtype


def mixed_weights(step: int) -> dict[str, torch.Tensor]:
    """Tensors of several dtypes and layouts; `step` changes every value."""
    gen = torch.Generator().manual_seed(step)
    return {
        "w": torch.randn(40, 30, generator=gen),
        "half": torch.randn(700, generator=gen).to(torch.bfloat16),
        "fp16": torch.randn(3, 5, generator=gen).to(torch.float16),
        "ids": torch.randint(-(2**40), 2**40, (9,), generator=gen),
        "scalar": torch.tensor(float(step) + 0.5),
        "transposed": torch.randn(6, 4, generator=gen).t(),
        "big": torch.randn(2000, generator=gen),  # larger than a bucket: a bucket of its own
    }


def tied_model(seed: int) -> torch.nn.Module:
    import transformers

    config = transformers.Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    return model.to(torch.bfloat16)


def clone(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in weights.items()}


def _member(rank: int, port_file: str, out: str) -> None:
    """One process: rank 0 sends, the others receive and save what they got."""
    import os
    import time
    from datetime import timedelta

    import torch.distributed as dist

    from rldag.compute.weights.broadcast import WeightGroup

    torch.set_num_threads(1)
    os.environ["RLDAG_SHARED_DIR"] = shm = f"{out}.shm"  # this test's own tmpfs directory
    before = set(os.listdir(shm))
    # The trainer's own default group (world of one here) exists before the weight groups.
    dist.init_process_group(
        "gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=timedelta(seconds=60)
    )
    size = RECEIVERS + 1
    groups = {}
    for mode, shared in MODES.items():
        path = Path(f"{port_file}.{mode}")
        if rank == 0:
            store, port = WeightGroup.open_store("127.0.0.1", 60)
            path.write_text(str(port))
            groups[mode] = WeightGroup.join("127.0.0.1", port, 0, size, "gloo", 60, store, shared)
        else:
            while not path.exists() or not path.read_text():
                time.sleep(0.05)
            port = int(path.read_text())
            groups[mode] = WeightGroup.join("127.0.0.1", port, rank, size, "gloo", 60, None, shared)
    model = tied_model(seed=rank)  # receivers start from other weights
    got: dict[str, object] = {"shared": {m: g.shared_memory for m, g in groups.items()}}
    for mode, group in groups.items():
        for step in (1, 2):  # the second sync reuses the first one's buffers
            if rank == 0:
                group.send(mixed_weights(step), SMALL_BUCKET)
            else:
                key = f"{mode}/mixed/{step}"
                group.receive(lambda w, key=key: got.update({key: clone(w)}))
        if rank == 0:
            group.send(model.state_dict(), 64 << 20)
        else:
            group.receive(model.load_state_dict)
            got[f"{mode}/model"] = clone(model.state_dict())
            got[f"{mode}/still_tied"] = (
                model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
            )
    total = torch.ones(1)
    dist.all_reduce(total)  # the default group still works, and is still a world of one
    got["default_group"] = (dist.get_world_size(), float(total.item()))
    for group in groups.values():
        group.close()
    got["left_files"] = sorted(set(os.listdir(shm)) - before)
    dist.destroy_process_group()
    torch.save(got, f"{out}.{rank}")


@pytest.fixture(scope="module")
def received(tmp_path_factory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("broadcast")
    shm = Path(tempfile.mkdtemp(prefix="rldag-test-", dir="/dev/shm"))
    (tmp / "got.shm").symlink_to(shm)  # the members' shared directory, on tmpfs
    ctx = forkserver()  # members fork from the preloaded server
    procs = [
        ctx.Process(target=_member, args=(r, str(tmp / "port"), str(tmp / "got")))
        for r in range(RECEIVERS + 1)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
    shutil.rmtree(shm)
    assert [p.exitcode for p in procs] == [0] * len(procs)
    return [torch.load(tmp / f"got.{r}") for r in range(RECEIVERS + 1)]


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(
            a.contiguous().reshape(-1).view(torch.uint8),
            b.contiguous().reshape(-1).view(torch.uint8),
        )
    )


@pytest.mark.parametrize("mode", MODES)
def test_every_receiver_gets_every_dtype_bit_for_bit(received, mode):
    for got in received[1:]:
        for step in (1, 2):
            sent = mixed_weights(step)
            back = got[f"{mode}/mixed/{step}"]
            assert set(back) == set(sent)
            assert all(same_bits(back[k], sent[k]) for k in sent), (mode, step)


@pytest.mark.parametrize("mode", MODES)
def test_a_tied_bf16_model_arrives_whole_and_stays_tied(received, mode):
    sent = tied_model(seed=0).state_dict()
    assert "lm_head.weight" in sent and sent["lm_head.weight"].dtype == torch.bfloat16
    for got in received[1:]:
        back = got[f"{mode}/model"]
        assert set(back) == set(sent)
        assert all(same_bits(back[k], sent[k]) for k in sent)
        assert got[f"{mode}/still_tied"]
    assert not same_bits(tied_model(seed=1).state_dict()["lm_head.weight"], sent["lm_head.weight"])


def test_one_host_uses_shared_memory_only_when_asked(received):
    assert all(got["shared"] == {"shared_memory": True, "sockets": False} for got in received)


def test_the_default_process_group_is_left_alone(received):
    assert all(got["default_group"] == (1, 1.0) for got in received)


def test_no_shared_memory_file_is_left_behind(received):
    assert all(got["left_files"] == [] for got in received)


def test_buckets_hold_one_dtype_within_the_size_bound():
    weights = mixed_weights(1)
    plan = plan_buckets(weights, SMALL_BUCKET)
    for bucket in plan:
        assert bucket.nbytes <= SMALL_BUCKET or len(bucket.slots) == 1
        dtypes = {weights[s.names[0]].dtype for s in bucket.slots}
        assert dtypes == {getattr(torch, bucket.dtype)}
    assert [b.dtype for b in plan].count("float32") >= 3  # w, big and the rest split up
    names = [n for b in plan for s in b.slots for n in s.names]
    assert sorted(names) == sorted(weights)


def test_tied_names_share_one_slot():
    state = tied_model(seed=0).state_dict()
    slots = [s for b in plan_buckets(state, 64 << 20) for s in b.slots]
    tied = [s for s in slots if len(s.names) > 1]
    assert [sorted(s.names) for s in tied] == [["lm_head.weight", "model.embed_tokens.weight"]]
    assert sum(s.numel for s in slots) == sum(
        p.numel() for p in tied_model(seed=0).parameters()
    )  # the tied matrix counts once


def test_flatten_then_unflatten_is_the_identity():
    weights = mixed_weights(3)
    for bucket in plan_buckets(weights, SMALL_BUCKET):
        buffer = torch.empty(bucket.numel, dtype=getattr(torch, bucket.dtype))
        flatten_into(bucket, weights, buffer)
        for name, view in unflatten(bucket, buffer).items():
            assert same_bits(view, weights[name])


def test_shared_memory_is_used_only_where_the_buckets_fit(tmp_path):
    small = plan_buckets(mixed_weights(1), SMALL_BUCKET)
    huge = (Bucket("float32", 1 << 50, 4, ()),)  # 4 PiB
    assert has_room(small, str(tmp_path)) and not has_room(huge, str(tmp_path))
