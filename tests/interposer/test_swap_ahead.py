"""Host copies pinned ahead of a swap-out (native/src/swap/swaphost.c, PREPARE_SWAP): on the
scheduler's word the pinner thread pins the host copies of the library's own device memory before
any swap-out is asked for, so the swap-out that follows only copies into them; without the word
nothing is pinned before the swap-out (swapcold.c pins then).

The app's range is 9M (10 MiB on the mock's 2 MiB granularity), in pieces of 4 MiB: 4 + 4 + 2, as
in test_swap_cold.py; the mock's pins sleep MOCK_CUDA_PIN_US, its copies say whether their host
side lies within one pinned range, and fillall/checkall cover every byte with a pattern that
changes with the offset: data read back intact proves every byte was copied out and back.
"""

from __future__ import annotations

import time

from xpushare.wire.protocol import DROP_EVICT, FEATURE_SWAP, HELLO_PIN_AHEAD, MessageType, PrepareSwap

from .harness import poll
from .swap_steps import drop, idle_env, ours, pins, residency, unpins

MIB = 1 << 20
RANGE = 10 * MIB
PIECES = [4 * MIB, 4 * MIB, 2 * MIB]


def _app(world, recorder, *steps, pin_us=50_000, sizes=("9M",), **env):
    """`sizes` allocated (9M) and filled, holding the lock, paused; `steps` after the resume."""
    recorder.welcome_features = FEATURE_SWAP
    allocs = [step for size in sizes for step in ("alloc", size)]
    app = world.app("init", "ctx", 0, *allocs, "fillall", 3, "launch", 1, "pause", *steps,
                    env=idle_env(NVSHARE_SWAP_PIN_PIECE="4M", NVSHARE_SWAP_PIN_THREADS=2,
                                 MOCK_CUDA_PIN_US=pin_us, **env))
    app.paused()
    return app


def _range(app, nth: int = 0) -> int:
    return app.steps("alloc")[nth]["ptr"]


def _prepare(recorder, on: int) -> None:
    recorder.send_to(PrepareSwap(device=0, on=on))


def _pinned(world, app, n: int) -> list[dict]:
    """Once the library pinned n pieces, those pieces."""
    poll(lambda: len(pins(world.log, app)) >= n, 15, what=f"{n} pinned pieces")
    return pins(world.log, app)


def _drop_ns(recorder) -> int:
    return recorder.sent_messages(MessageType.DROP_LOCK)[-1].at_ns


def test_on_the_hint_the_host_copy_is_pinned_ahead_and_the_swap_out_only_copies(world, recorder):
    app = _app(world, recorder, "checkall", 3)
    assert recorder.messages(MessageType.HELLO)[0].msg.flags & HELLO_PIN_AHEAD
    _prepare(recorder, 1)
    ahead = _pinned(world, app, len(PIECES))
    assert sorted(e["size"] for e in ahead) == sorted(PIECES)
    drop(recorder, 1)
    log, base = world.log, _range(app)
    assert pins(log, app) == ahead, "the swap-out pinned nothing more"
    assert max(e["t1"] for e in ahead) < _drop_ns(recorder), "all pinned before the swap-out"
    piece_at = {e["ptr"] for e in ahead}
    out = sorted((e for e in ours(log, app, "cuMemcpyDtoHAsync_v2") if base <= e["src"] < base + RANGE),
                 key=lambda e: e["src"])
    assert [(c["src"] - base, c["bytes"]) for c in out] == [(0, 4 * MIB), (4 * MIB, 4 * MIB),
                                                            (8 * MIB, 2 * MIB)], "every byte copied"
    assert all(c["pinned"] == 1 and c["dst"] in piece_at for c in out), "into the pieces made ahead"
    (gone,) = residency(recorder)
    assert (gone.resident_bytes, gone.host_bytes) == (0, RANGE)
    app.resume()
    assert app.finish() == 0
    assert app.steps("checkall")[0]["ok"] == 1, "the bytes came back as they were"
    assert unpins(log, app) == []
    assert recorder.errors == []


def test_without_the_hint_nothing_is_pinned_before_the_swap_out(world, recorder):
    app = _app(world, recorder, "checkall", 3)
    time.sleep(0.5)
    assert pins(world.log, app, ok=False) == []
    drop(recorder, 1)
    cold = pins(world.log, app)
    assert len(cold) == len(PIECES) and min(e["t0"] for e in cold) > _drop_ns(recorder)
    app.resume()
    assert app.finish() == 0
    assert app.steps("checkall")[0]["ok"] == 1


def test_without_the_swap_store_the_hint_is_not_offered(world, recorder):
    app = _app(world, recorder, NVSHARE_SWAP="off")
    assert not recorder.messages(MessageType.HELLO)[0].msg.flags & HELLO_PIN_AHEAD
    app.resume()
    assert app.finish() == 0


def test_later_allocations_get_theirs_while_on_and_off_keeps_what_was_pinned(world, recorder):
    app = _app(world, recorder, "alloc", "9M", "launch", 1, "pause", "alloc", "9M", "launch", 1,
               "pause", pin_us=10_000, NVSHARE_DEBUG=1)
    _prepare(recorder, 1)
    _pinned(world, app, len(PIECES))
    app.resume()
    app.paused(nth=2)
    second = _pinned(world, app, 2 * len(PIECES))
    assert len(second) == 2 * len(PIECES), "the range allocated while on is pinned too"
    _prepare(recorder, 0)
    poll(lambda: "no longer likely" in app.stderr(), 5, what="the hint withdrawn")
    app.resume()
    app.paused(nth=3)
    poll(lambda: any(sum(m.footprint) >= 3 * RANGE for m in recorder.messages(MessageType.MEM_UPDATE)),
         5, what="the third range's MEM_UPDATE")
    time.sleep(0.3)
    assert len(pins(world.log, app)) == 2 * len(PIECES), "off: nothing more pinned ahead"
    assert unpins(world.log, app) == [], "off: what was pinned is kept"
    app.resume()
    assert app.finish() == 0


def test_a_range_freed_after_its_copy_was_made_ahead_releases_it(world, recorder):
    app = _app(world, recorder, "free", "last", "launch", 1, "pause")
    _prepare(recorder, 1)
    ahead = _pinned(world, app, len(PIECES))
    app.resume()
    app.paused(nth=2)
    poll(lambda: len(unpins(world.log, app)) >= len(ahead), 5, what="the copy released")
    assert sorted(e["ptr"] for e in unpins(world.log, app)) == sorted(e["ptr"] for e in ahead)
    app.resume()
    assert app.finish() == 0


def _copied_once_pinned(world, app, pinned: list[dict]) -> None:
    """Each swap-out copy fills one pinned piece, after that piece was pinned."""
    piece_of = {e["ptr"]: e for e in pinned}
    copies = [e for e in ours(world.log, app, "cuMemcpyDtoHAsync_v2") if e["dst"] in piece_of]
    assert len(copies) == len(pinned)
    for c in copies:
        assert c["pinned"] == 1 and piece_of[c["dst"]]["t1"] <= c["t0"]


def _swap_again_and_check(recorder, app) -> None:
    """The app's second swap-out and its swap-in; then every byte checked."""
    app.resume()
    app.paused(nth=2)
    drop(recorder, 2)
    app.resume()
    assert app.finish() == 0
    assert app.steps("checkall")[0]["ok"] == 1


def test_an_eviction_while_the_pinner_is_at_work_takes_its_range_over(world, recorder):
    """The hint, then a drop once the pinner has pinned the first piece of the range: the pinner
    stops after its piece, and the swap-out's own pinners pin the rest of that very range (no
    piece twice, none let go); the data comes back intact."""
    app = _app(world, recorder, "checkall", 3, pin_us=300_000)
    _prepare(recorder, 1)
    first = _pinned(world, app, 1)[0]
    drop(recorder, 1)
    pinned = pins(world.log, app)
    assert len(pinned) == len(PIECES) and not unpins(world.log, app)
    assert len({e["ptr"] for e in pinned}) == len(PIECES), "a piece pinned twice"
    assert {e["tid"] for e in pinned[1:]} - {first["tid"]}, "the swap-out pinned none of the rest"
    _copied_once_pinned(world, app, pinned)
    app.resume()
    assert app.finish() == 0
    assert app.steps("checkall")[0]["ok"] == 1


def test_a_swap_out_before_the_pinner_is_done_takes_over_and_no_range_is_pinned_twice(world, recorder):
    """The hint just before the drop, two ranges, the pins slow: the pinner stops after the piece
    it is pinning, the swap-out pins the rest of both ranges; every piece is pinned once, none let
    go, each copied once pinned, and the data comes back intact."""
    app = _app(world, recorder, "launch", 1, "pause", "checkall", 3, pin_us=200_000,
               sizes=("9M", "9M"))
    _prepare(recorder, 1)
    _pinned(world, app, 1)        # the pinner is on the first range
    drop(recorder, 1)
    (out,) = residency(recorder)
    assert (out.resident_bytes, out.host_bytes) == (0, 2 * RANGE)
    pinned = pins(world.log, app)
    assert len(pinned) == 2 * len(PIECES) and not unpins(world.log, app)
    assert len({e["ptr"] for e in pinned}) == len(pinned), "a piece pinned twice"
    _copied_once_pinned(world, app, pinned)
    _swap_again_and_check(recorder, app)
    assert len(pins(world.log, app)) == 2 * len(PIECES), "the copies serve the next swap-out"


def test_a_range_begun_that_the_eviction_does_not_move_goes_on_from_its_pieces(world, recorder):
    """A partial eviction (evict_mib 1: the smallest range that covers it, the 1M one) while the
    pinner is inside the 9M range: the pinner stops after its piece, the eviction leaves that
    copy, and the pinner goes on from the pieces it had: every piece of both ranges pinned once,
    none let go, and every byte comes back."""
    app = _app(world, recorder, "launch", 1, "pause", "checkall", 3, pin_us=300_000,
               sizes=("9M", "1M"))
    _prepare(recorder, 1)
    _pinned(world, app, 1)        # a piece done: the pinner is inside the 9M range (its next piece)
    recorder.wait_count(MessageType.REQ_LOCK, 1, device=0)
    recorder.drop(0, flags=DROP_EVICT, evict_mib=1)
    recorder.wait_count(MessageType.LOCK_RELEASED, 1, device=0)
    everything = _pinned(world, app, len(PIECES) + 1)  # the 1M range's one piece, and the rest
    time.sleep(0.5)               # nothing more comes: no piece is pinned again
    assert len(pins(world.log, app)) == len(everything) and not unpins(world.log, app)
    assert len({e["ptr"] for e in everything}) == len(everything)
    _swap_again_and_check(recorder, app)
    assert len(pins(world.log, app)) == len(PIECES) + 1, "the copies serve the next swap-out"


def test_off_stops_a_range_part_way_and_lets_its_pieces_go(world, recorder):
    """Off while a range is pinned ahead: no piece after the current one, and what was pinned of
    it is released (it is not attached: its swap-out pins it whole, as without the hint)."""
    app = _app(world, recorder, "checkall", 3, pin_us=300_000)
    _prepare(recorder, 1)
    _pinned(world, app, 1)
    _prepare(recorder, 0)
    poll(lambda: len(unpins(world.log, app)) >= len(pins(world.log, app)), 5, what="released")
    partial = pins(world.log, app)
    assert 0 < len(partial) < len(PIECES)
    assert sorted(e["ptr"] for e in unpins(world.log, app)) == sorted(e["ptr"] for e in partial)
    drop(recorder, 1)
    assert len(pins(world.log, app)) == len(partial) + len(PIECES), "the swap-out pinned it whole"
    app.resume()
    assert app.finish() == 0
    assert app.steps("checkall")[0]["ok"] == 1
