"""placement.py, pure: the ranking key one rule at a time, the errors, the reasons; and a seeded random
property test (the chosen GPUs are `count` distinct healthy ones, and none left out is at least as
good on every key and better on one than one taken)."""

import random

import pytest

from sched_harness import GiB, uuid
from xpushare.scheduler.control.placement import GpuLoad, PlacementError, choose, new_home, rank, reason


def gpu(index, used=0, waiters=0, holders=0, committed=0.0, capacity=80 * GiB, healthy=True):
    return GpuLoad(index, uuid(index if index is not None else 99), capacity, used, waiters,
                   holders, committed, healthy)


# (what the rule is, the GPUs, memory asked, the order expected (indexes))
TABLE = [
    ("idle GPUs: by index", [gpu(2), gpu(0), gpu(1)], 0, [0, 1, 2]),
    ("fewer waiters first", [gpu(0, waiters=2), gpu(1, waiters=1), gpu(2)], 0, [2, 1, 0]),
    ("waiters before committed compute",
     [gpu(0, waiters=1), gpu(1, committed=3.0, holders=3)], 0, [1, 0]),
    ("waiters before memory", [gpu(0, waiters=1), gpu(1, used=40 * GiB)], 0, [1, 0]),
    ("less committed compute first",
     [gpu(0, committed=1.0), gpu(1, committed=0.25), gpu(2, committed=0.5)], 0, [1, 2, 0]),
    ("committed compute before memory",
     [gpu(0, committed=1.0, used=GiB), gpu(1, committed=2.0, used=0)], 0, [0, 1]),
    ("less memory used first", [gpu(0, used=10 * GiB), gpu(1, used=5 * GiB), gpu(2)], 0, [2, 1, 0]),
    ("a GPU the job does not fit goes last, whatever else",
     [gpu(0, used=70 * GiB), gpu(1, waiters=5, committed=4.0, used=10 * GiB)], 20 * GiB, [1, 0]),
    ("fit is to the byte", [gpu(0, used=60 * GiB, waiters=1), gpu(1, used=61 * GiB)], 20 * GiB,
     [0, 1]),
    ("an oversubscribed GPU does not fit even no memory",
     [gpu(0, used=81 * GiB), gpu(1, used=79 * GiB, waiters=3)], 0, [1, 0]),
    ("unknown capacity fits no memory asked",
     [gpu(0, capacity=0, used=5 * GiB), gpu(1, used=6 * GiB)], 0, [0, 1]),
    ("unknown capacity does not fit memory asked",
     [gpu(0, capacity=0), gpu(1, used=6 * GiB, waiters=2)], GiB, [1, 0]),
    ("unhealthy GPUs are never ranked", [gpu(0, healthy=False), gpu(1, waiters=9)], 0, [1]),
    ("a GPU without an index after those with one", [gpu(None), gpu(5)], 0, [5, None]),
]


@pytest.mark.parametrize("what,loads,memory,order", TABLE, ids=[t[0] for t in TABLE])
def test_ranking_key(what, loads, memory, order):
    assert [g.index for g in rank(loads, memory)] == order
    assert [g.index for g in choose(loads, len(order), memory)] == order
    assert [g.index for g in choose(loads, 1, memory)] == order[:1]


def test_more_gpus_than_known_is_an_error_naming_them():
    with pytest.raises(PlacementError, match=r"asked for 3 GPUs, but the scheduler knows 2 it can "
                                             r"place on \(0, 2\)"):
        choose([gpu(2), gpu(0, waiters=1), gpu(1, healthy=False)], 3)  # in index order
    with pytest.raises(PlacementError, match=r"asked for 1 GPU, but .* knows 0 .*\(none\)"):
        choose([], 1)
    with pytest.raises(PlacementError, match="at least 1"):
        choose([gpu(0)], 0)


def test_reasons_say_the_values_of_the_key():
    assert reason(gpu(3, used=16 * GiB, waiters=1, holders=2, committed=1.5)) == (
        "gpu 3: 64GiB free of 80GiB, 1 waiting, 2 holding, compute 1.5 committed")
    assert reason(gpu(1, used=70 * GiB), 20 * GiB) == (
        "gpu 1: 10GiB free of 80GiB, does not fit 20GiB, 0 waiting, 0 holding, compute 0 committed")
    assert reason(gpu(0, used=90 * GiB)) == (
        "gpu 0: 0B free of 80GiB (oversubscribed by 10GiB), does not fit more, 0 waiting, "
        "0 holding, compute 0 committed")
    assert reason(gpu(0, capacity=0)).startswith("gpu 0: capacity unknown, 0 waiting")


def _random_load(rng: random.Random, index: int) -> GpuLoad:
    # Few distinct values per key, so that ties (where later keys decide) are common.
    return GpuLoad(index, uuid(index), rng.choice([0, 16 * GiB, 80 * GiB]),
                   rng.choice([0, 8 * GiB, 40 * GiB, 90 * GiB]), rng.randint(0, 2),
                   rng.randint(0, 2), rng.choice([0.0, 0.5, 1.0, 2.0]), rng.random() > 0.15)


def _dominates(a: GpuLoad, b: GpuLoad, memory: int) -> bool:
    """a is at least as good as b on every key but the tie-breaking index, and better on one."""
    ka, kb = a.key(memory)[:4], b.key(memory)[:4]
    return all(x <= y for x, y in zip(ka, kb)) and ka != kb


def test_random_placements_take_distinct_healthy_gpus_and_never_a_dominated_one():
    rng = random.Random(12)
    for _ in range(3000):
        loads = [_random_load(rng, i) for i in rng.sample(range(16), rng.randint(1, 8))]
        healthy = [g for g in loads if g.healthy]
        memory = rng.choice([0, 0, GiB, 30 * GiB])
        count = rng.randint(1, len(loads) + 1)
        if count > len(healthy):
            with pytest.raises(PlacementError):
                choose(loads, count, memory)
            continue
        chosen = choose(loads, count, memory)
        assert len(chosen) == count and len({g.uuid for g in chosen}) == count
        assert all(g.healthy for g in chosen)
        left = [g for g in healthy if g not in chosen]
        for out in left:
            for taken in chosen:
                assert not _dominates(out, taken, memory), (out, taken, memory)
        # Ties on every key but the index go to the lower index.
        for out in left:
            for taken in chosen:
                if out.key(memory)[:4] == taken.key(memory)[:4]:
                    assert taken.index < out.index


# new_home: (what, the source GPU, the others, need, mine, the index chosen or None)
HOMES = [
    ("room where it is: it stays", gpu(0, used=60 * GiB), [gpu(1)], 20 * GiB, 10 * GiB, None),
    ("its own memory counts as room where it is", gpu(0, used=75 * GiB), [gpu(1)], 15 * GiB,
     10 * GiB, None),
    ("full where it is: the best GPU that fits", gpu(0, used=90 * GiB),
     [gpu(1, used=70 * GiB), gpu(2, used=10 * GiB, waiters=1), gpu(3, used=20 * GiB)], 20 * GiB,
     10 * GiB, 3),
    ("full everywhere: it stays", gpu(0, used=90 * GiB), [gpu(1, used=70 * GiB)], 20 * GiB,
     10 * GiB, None),
    ("never an unhealthy GPU", gpu(0, used=90 * GiB), [gpu(1, healthy=False)], 20 * GiB, 10 * GiB,
     None),
    ("never a GPU of unknown capacity", gpu(0, used=90 * GiB), [gpu(1, capacity=0)], 20 * GiB,
     10 * GiB, None),
    ("unknown capacity where it is: nothing says it is full", gpu(0, capacity=0, used=90 * GiB),
     [gpu(1)], 20 * GiB, 10 * GiB, None),
    ("the source is never its own new home", gpu(0, used=90 * GiB), [gpu(0, used=90 * GiB)],
     20 * GiB, 10 * GiB, None),
]


@pytest.mark.parametrize("what, source, others, need, mine, expected", HOMES, ids=[h[0] for h in HOMES])
def test_new_home_moves_a_client_only_off_a_full_gpu_onto_one_it_fits(what, source, others, need,
                                                                     mine, expected):
    home = new_home([source, *others], source, need, mine)
    assert (home and home.index) == expected
