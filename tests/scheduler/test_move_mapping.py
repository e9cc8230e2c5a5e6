"""The GPU pairs a move hands the driver (checkpoint_worker.full_mapping): the driver takes a
mapping of every GPU the kernel driver has, each once as old and once as new, whatever the process
sees (CUDA_VISIBLE_DEVICES does not narrow it; a mapping of fewer is refused as an invalid value).
Table-driven, then invariants over seeded random moves."""

from __future__ import annotations

import random

import pytest

from xpushare.scheduler.node.checkpoint_worker import full_mapping, uuid_text

G = [bytes(15) + bytes([i]) for i in range(8)]  # the mock's UUIDs: physical index in the last byte


def _map(pairs, n):
    return {G.index(o): G.index(nw) for o, nw in full_mapping([(G[o], G[nw]) for o, nw in pairs], G[:n])}


@pytest.mark.parametrize("pairs, n, mapping", [
    ([(0, 0)], 1, {0: 0}),                                 # one GPU onto itself (the H200 probe)
    ([(0, 1)], 2, {0: 1, 1: 0}),                           # a move on two GPUs: the swap
    ([(0, 1)], 4, {0: 1, 1: 0, 2: 2, 3: 3}),               # the others stay where they are
    ([(2, 1)], 3, {0: 0, 1: 2, 2: 1}),
    ([(0, 1), (1, 0)], 2, {0: 1, 1: 0}),                   # a swap asked for
    ([(0, 1), (1, 2)], 3, {0: 1, 1: 2, 2: 0}),             # a rotation
    ([(0, 3), (1, 2)], 4, {0: 3, 1: 2, 2: 0, 3: 1}),       # the rest paired in node order
])
def test_the_mapping_covers_every_gpu_once_each_way(pairs, n, mapping):
    assert _map(pairs, n) == mapping


@pytest.mark.parametrize("pairs, n, why", [
    ([(0, 4)], 4, "is not a GPU of this node"),
    ([(5, 0)], 4, "is not a GPU of this node"),
    ([(0, 1), (0, 2)], 3, "named twice"),
    ([(0, 2), (1, 2)], 3, "named twice"),
    ([(0, 0)], 0, "lists no GPU"),
])
def test_a_mapping_that_cannot_be_made_is_refused_with_the_reason(pairs, n, why):
    with pytest.raises(ValueError, match=why):
        _map(pairs, n)


def test_the_refusal_names_the_gpu_as_nvml_writes_it():
    with pytest.raises(ValueError, match=uuid_text(G[6]).replace("-", r"\-")):
        full_mapping([(G[0], G[6])], G[:2])


def test_random_moves_keep_what_was_asked_and_leave_every_other_gpu_alone_where_it_can():
    rng = random.Random(32)
    for _ in range(500):
        n = rng.randint(1, 8)
        k = rng.randint(1, n)
        olds, news = rng.sample(range(n), k), rng.sample(range(n), k)
        mapping = _map(list(zip(olds, news)), n)
        assert sorted(mapping) == sorted(mapping.values()) == list(range(n))  # a permutation
        assert all(mapping[o] == nw for o, nw in zip(olds, news))           # the moves asked for
        free = [g for g in range(n) if g not in olds and g not in news]
        assert all(mapping[g] == g for g in free)                           # untouched GPUs stay
