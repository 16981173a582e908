"""Exactly-once resume as an invariant, the fast seeded subset of bench/chaos_resume.py: an
asynchronous (k = 2) run with streaming and DAPO's dynamic sampling is SIGKILLed with its
process group twice, mid-Parquet write and mid-stream (the bench's kill points, at fixed
places), resumed after each with `--resume RUN_ID`, and completes with
every prompt of the epoch consumed once, no row missing or duplicated, no torn or temporary
file, and the rows of the run that was never killed. A run killed mid-refill round (DAPO's
refill: rldag/engine/refill.py) resumes the same way."""

from __future__ import annotations

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from rldag.storage.store import TMP_PREFIX
from tests.support.chaos import (
    INVARIANTS,
    PIPELINE,
    Kill,
    Launch,
    Shape,
    chaos_run,
    check,
    write_epoch,
)
from tests.support.runs import run_pipeline

# The 21st Parquet file in its temporary name (at most 20 are written before iteration 0 is
# checkpointed: 7 tables of iterations 0, 6 of 1 and 2, and metrics.parquet), then a chunk of
# the resumed run's stream.
KILLS = [Kill("parquet", 21), Kill("stream_chunk", 4)]


@pytest.mark.usefixtures("prefect_api")  # the CLI processes report to the session's server
def test_killed_twice_the_run_is_the_uninterrupted_one(ray_local, tiny_task, tmp_path):
    shape = Shape(k=2, iterations=4, every=1, max_rounds=1)  # the kills count its tables
    data = write_epoch(tiny_task, shape, tmp_path / "epoch.parquet")
    # the run that was never killed, in this process (the same rows by construction; the
    # bench runs it through the CLI)
    reference = run_pipeline(PIPELINE, *shape.overrides(tiny_task, data, tmp_path / "ref"))

    storage = tmp_path / "chaos"
    leftovers: list[list[str]] = []  # the temporary files each launch left behind

    def left(launch: Launch) -> None:
        leftovers.append(sorted(p.name for p in storage.rglob(f"{TMP_PREFIX}*")))

    chaos = chaos_run(shape.overrides(tiny_task, data, storage), storage, KILLS, on_launch=left)
    assert chaos.completed, (storage / "chaos.log").read_text()[-3000:]
    described = [launch.describe() for launch in chaos.launches]
    # every kill was reached, each after a checkpoint, and each launch after it resumed
    assert [launch.killed_at.split(" ")[0] for launch in chaos.kills] == [str(k) for k in KILLS]
    assert len(chaos.launches) == len(KILLS) + 1, described
    assert all(launch.resumed_from is not None for launch in chaos.launches[1:]), described
    # the killed Parquet write left its temporary file; the resume removed it
    assert leftovers[0] and not leftovers[-1], leftovers
    assert check(chaos.run_dir, reference.run_dir, shape) == {
        "prompts once": [],
        "rows once": [],
        "no torn or temporary file": [],
        "uninterrupted rows": [],
    }


@pytest.mark.usefixtures("prefect_api")
def test_killed_in_continuous_mode_every_prompt_and_row_is_stored_once(tiny_task, tmp_path):
    """Continuous generation (k = 2) killed mid-Parquet write and resumed: exactly-once on
    stored data. Its rows are not compared with an uninterrupted run's: which token a
    mid-sequence weight update reaches depends on timing (the cursor still fixes every prompt
    of every iteration, which "prompts once" checks)."""
    # in-process pools (threads), and the kill counts its tables
    shape = Shape(k=2, iterations=4, every=1, max_rounds=1, ray=False)
    data = write_epoch(tiny_task, shape, tmp_path / "epoch.parquet")
    storage = tmp_path / "chaos"
    overrides = [*shape.overrides(tiny_task, data, storage), "async.mode=continuous"]
    chaos = chaos_run(overrides, storage, KILLS[:1])
    assert chaos.completed, (storage / "chaos.log").read_text()[-3000:]
    assert len(chaos.launches) == 2 and chaos.launches[1].resumed_from is not None
    problems = check(chaos.run_dir, chaos.run_dir, shape)
    assert {name: problems[name] for name in INVARIANTS[:3]} == {
        "prompts once": [],
        "rows once": [],
        "no torn or temporary file": [],
    }
    for t in range(shape.iterations):  # and every trained token within the bound
        tokens = pq.read_table(chaos.run_dir / f"iter={t}" / "advantage.parquet")
        assert min(pc.list_flatten(tokens["response_versions"]).to_pylist()) >= t - shape.k


@pytest.mark.usefixtures("prefect_api")
def test_killed_mid_refill_the_run_resumes_exactly_once(tiny_task, tmp_path):
    """Without oversampling the tiny task's first rounds are short and refill rounds draw on
    into the next epoch; SIGKILLed as a refill round starts (k = 1, in-process pools), the
    resumed run draws the same batches, each once, and stores the uninterrupted run's rows."""
    shape = Shape(k=1, iterations=3, batch_size=4, oversample=1.0, every=1, ray=False)
    data = write_epoch(tiny_task, shape, tmp_path / "epoch.parquet")
    reference = run_pipeline(PIPELINE, *shape.overrides(tiny_task, data, tmp_path / "ref"))
    rounds = [int(r) for r in reference.metric("refill/rounds")]
    # the first refill round of an iteration >= 2 (iteration 0 is checkpointed once 2 opens),
    # its second when it has one: the rounds before it are stored
    target = next(i for i in range(2, shape.iterations) if rounds[i] > 1)
    kill = Kill("refill", 1 + sum(r - 1 for r in rounds[:target]) + (rounds[target] > 2))

    storage = tmp_path / "chaos"
    chaos = chaos_run(shape.overrides(tiny_task, data, storage), storage, [kill])
    assert chaos.completed, (storage / "chaos.log").read_text()[-3000:]
    described = [launch.describe() for launch in chaos.launches]
    assert [launch.killed_at for launch in chaos.kills] == [
        f"{kill} Step(iteration={target}, node='filter', round={1 + (rounds[target] > 2)})"
    ], described
    assert len(chaos.launches) == 2 and chaos.launches[1].resumed_from is not None, described
    assert check(chaos.run_dir, reference.run_dir, shape) == {
        "prompts once": [],
        "rows once": [],
        "no torn or temporary file": [],
        "uninterrupted rows": [],
    }
