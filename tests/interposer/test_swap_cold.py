"""The first swap-out of device memory of the library's own (native/src/swap/swapcold.c): its host
copy is pinned piece by piece (swappin.c) on worker threads while the pieces already pinned are
copied out, and a piece the driver refuses leaves the range on the GPU with everything pinned for
it released.

The app's range is 9M (10 MiB once rounded to the mock's 2 MiB granularity), pinned in pieces of
4 MiB: 4 + 4 + 2, so the last piece is shorter. The mock's pins sleep MOCK_CUDA_PIN_US (slow, as
on a real host), count toward MOCK_CUDA_PIN_FAIL_AT, and its copies log whether their host side
lies within one pinned range ("pinned"). fillall/checkall cover every byte with a pattern that
changes with the offset, and the mock's cuMemCreate gives zeroed memory: data read back intact
proves each piece came back to its place.
"""

from __future__ import annotations

import pytest

from xpushare.wire.protocol import FEATURE_SWAP, RESIDENCY_REFUSED, MessageType

from .swap_steps import drop, idle_env, ours, pins, residency, unpins

MIB = 1 << 20
RANGE = 10 * MIB
PIECES = [4 * MIB, 4 * MIB, 2 * MIB]
SLOW_PIN_US = 100_000


def _env(**extra) -> dict:
    return idle_env(**{"NVSHARE_SWAP_PIN_PIECE": "4M", "NVSHARE_SWAP_PIN_THREADS": 2,
                       "MOCK_CUDA_PIN_US": SLOW_PIN_US, **extra})


def _app(world, recorder, *steps, **env):
    """9M allocated and filled, holding the lock, paused; `steps` after the resume."""
    recorder.welcome_features = FEATURE_SWAP
    app = world.app("init", "ctx", 0, "alloc", "9M", "fillall", 3, "launch", 1, "pause", *steps,
                    env=_env(**env))
    app.paused()
    return app


def _range(app) -> int:
    (alloc,) = app.steps("alloc")
    return alloc["ptr"]


def _copies(log, app, fn) -> list[dict]:
    """The library's copies of fn between the range and host memory (not its checksums' reads)."""
    base, key = _range(app), "src" if fn == "cuMemcpyDtoHAsync_v2" else "dst"
    return sorted((e for e in ours(log, app, fn) if base <= e[key] < base + RANGE),
                  key=lambda e: e["t0"])


def test_a_cold_swap_out_copies_each_piece_as_soon_as_it_is_pinned(world, recorder):
    app = _app(world, recorder, "checkall", 3)
    drop(recorder, 1)
    log, base = world.log, _range(app)
    pinned = pins(log, app)
    assert [e["size"] for e in sorted(pinned, key=lambda e: e["ptr"])] == PIECES
    assert {e["fn"] for e in pinned} == {"cuMemHostRegister"}, "the default: registered in place"
    starts = sorted(e["ptr"] for e in pinned)
    assert starts == [starts[0], starts[0] + 4 * MIB, starts[0] + 8 * MIB], "one mapping, in order"
    piece_of = {e["ptr"]: e for e in pinned}
    out = _copies(log, app, "cuMemcpyDtoHAsync_v2")
    assert [(c["src"] - base, c["bytes"]) for c in out] == [(0, 4 * MIB), (4 * MIB, 4 * MIB),
                                                            (8 * MIB, 2 * MIB)]
    for c in out:
        assert c["pinned"] == 1 and c["dst"] in piece_of, "each copy fills exactly one pinned piece"
        assert piece_of[c["dst"]]["t1"] <= c["t0"], "a piece is copied only once it is pinned"
    assert out[0]["t0"] < max(e["t1"] for e in pinned), "the copies overlap the pinning"
    (gone,) = residency(recorder)
    assert (gone.resident_bytes, gone.host_bytes, gone.flags & RESIDENCY_REFUSED) == (0, RANGE, 0)
    app.resume()
    assert app.finish() == 0
    assert app.steps("checkall")[0]["ok"] == 1
    back = _copies(log, app, "cuMemcpyHtoDAsync_v2")
    assert [(c["dst"] - base, c["bytes"], c["pinned"]) for c in back] == [
        (0, 4 * MIB, 1), (4 * MIB, 4 * MIB, 1), (8 * MIB, 2 * MIB, 1)]
    assert recorder.errors == []


def test_without_registration_each_piece_is_allocated_pinned_and_the_data_comes_back(world, recorder):
    app = _app(world, recorder, "checkall", 3, "free", "last", MOCK_CUDA_HOST_REGISTER=0)
    drop(recorder, 1)
    app.resume()
    assert app.finish() == 0
    log = world.log
    assert app.steps("checkall")[0]["ok"] == 1
    refused = [e for e in ours(log, app, "cuMemHostRegister") if e["ret"] != 0]
    allocated = [e for e in ours(log, app, "cuMemHostAlloc") if e["ret"] == 0]
    assert len(refused) == 3 and sorted(e["size"] for e in allocated) == sorted(PIECES)
    assert [c["pinned"] for c in _copies(log, app, "cuMemcpyDtoHAsync_v2")] == [1, 1, 1]
    assert sorted(e["ptr"] for e in unpins(log, app)) == sorted(e["ptr"] for e in allocated)
    assert {e["fn"] for e in unpins(log, app)} == {"cuMemFreeHost"}


@pytest.mark.parametrize("method, fail_at, calls", [
    ("register", "2-3", ["cuMemHostRegister", "cuMemHostRegister", "cuMemHostAlloc"]),
    ("alloc", "2", ["cuMemHostAlloc", "cuMemHostAlloc"]),
])
def test_a_piece_refused_part_way_leaves_the_range_on_the_gpu_and_releases_what_was_pinned(
        world, recorder, method, fail_at, calls):
    """One pinner, the second piece refused (registered, and by its cuMemHostAlloc fallback): the
    first piece (pinned, maybe already copied) is let go, the third never pinned, the range stays
    mapped with its data, and the host accounting is back where it was: under a limit of exactly
    the range, the next swap-out takes it whole."""
    app = _app(world, recorder, "launch", 1, "pause", "checkall", 3, NVSHARE_SWAP_PIN=method,
               NVSHARE_SWAP_PIN_THREADS=1, MOCK_CUDA_PIN_FAIL_AT=fail_at,
               NVSHARE_HOST_SWAP_LIMIT="10M")
    drop(recorder, 1)
    log, base = world.log, _range(app)
    first = pins(log, app, ok=False)
    assert [e["fn"] for e in first] == calls, "no piece after the refused one"
    assert [e["ret"] == 0 for e in first] == [True] + [False] * (len(calls) - 1)
    assert [e["ptr"] for e in unpins(log, app)] == [first[0]["ptr"]], "what was pinned is let go"
    assert [e for e in log.entries(app.pid, "cuMemUnmap") if e["ptr"] == base] == []
    (stayed,) = residency(recorder)
    assert (stayed.resident_bytes, stayed.host_bytes) == (RANGE, 0)
    assert stayed.flags & RESIDENCY_REFUSED
    assert "stays on the GPU" in app.stderr()

    app.resume()
    app.paused(nth=2)
    drop(recorder, 2)
    assert (residency(recorder)[-1].resident_bytes, residency(recorder)[-1].host_bytes) == (0, RANGE)
    assert [e["size"] for e in pins(log, app)][1:] == PIECES, "within the limit again, whole"
    app.resume()
    assert app.finish() == 0
    assert app.steps("checkall")[0]["ok"] == 1


def test_past_the_host_limit_nothing_is_pinned_and_the_range_stays(world, recorder):
    app = _app(world, recorder, "checkall", 3, NVSHARE_HOST_SWAP_LIMIT="8M")
    drop(recorder, 1)
    assert pins(world.log, app, ok=False) == []
    (stayed,) = residency(recorder)
    assert (stayed.resident_bytes, stayed.host_bytes) == (RANGE, 0)
    assert stayed.flags & RESIDENCY_REFUSED
    app.resume()
    assert app.finish() == 0
    assert app.steps("checkall")[0]["ok"] == 1


def test_a_free_while_swapped_out_releases_every_piece(world, recorder):
    app = _app(world, recorder, "free", "last", "launch", 1)
    drop(recorder, 1)
    app.resume()
    assert app.finish() == 0
    log = world.log
    assert sorted(e["ptr"] for e in unpins(log, app)) == sorted(e["ptr"] for e in pins(log, app))
    assert {e["fn"] for e in unpins(log, app)} == {"cuMemHostUnregister"}
    assert ours(log, app, "cuMemcpyHtoDAsync_v2") == [], "a freed range is not swapped in"
    assert recorder.messages(MessageType.MEM_UPDATE)[-1].footprint == (0, 0)


def test_a_fork_child_leaves_the_parents_host_copy_alone(world, recorder):
    """Out and back, a child forked (it never touches CUDA), then out (clean: the host copy is
    reused, nothing pinned again) and back: the parent's bytes are intact."""
    app = _app(world, recorder, "fork", "{", "}", "launch", 1, "pause", "checkall", 3)
    drop(recorder, 1)
    app.resume()
    app.paused(nth=2)
    drop(recorder, 2)
    app.resume()
    assert app.finish() == 0
    assert app.steps("fork")[0]["status"] == 0
    assert app.steps("checkall")[0]["ok"] == 1
    assert len(pins(world.log, app)) == len(PIECES), "the second swap-out reuses the pieces"
