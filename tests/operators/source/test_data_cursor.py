"""Which rows iteration i reads (operators/source/cursor.py): a pure function of the dataset
size, batch size, i and seed; every epoch visits every row once."""

from __future__ import annotations

import numpy as np

from operators.source.cursor import batch_indices, epoch_order


def test_without_shuffle_batches_walk_the_file_in_order_and_wrap():
    assert batch_indices(5, 3, 0, seed=0, shuffle=False).tolist() == [0, 1, 2]
    assert batch_indices(5, 3, 1, seed=0, shuffle=False).tolist() == [3, 4, 0]
    assert batch_indices(5, 3, 2, seed=0, shuffle=False).tolist() == [1, 2, 3]


def test_each_epoch_is_its_own_seeded_permutation():
    rows, size = 10, 4
    stream = np.concatenate([batch_indices(rows, size, i, seed=7, shuffle=True) for i in range(5)])
    first, second = stream[:rows], stream[rows:]
    assert sorted(first) == list(range(rows)) and sorted(second) == list(range(rows))
    assert first.tolist() == epoch_order(rows, 0, 7, True).tolist()
    assert second.tolist() == epoch_order(rows, 1, 7, True).tolist()
    assert first.tolist() != second.tolist()


def test_a_batch_depends_only_on_seed_and_iteration():
    again = [batch_indices(10, 4, 3, seed=1, shuffle=True).tolist() for _ in range(2)]
    assert again[0] == again[1]
    assert batch_indices(10, 4, 3, seed=2, shuffle=True).tolist() != again[0]
