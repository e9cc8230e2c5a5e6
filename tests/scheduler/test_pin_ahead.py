"""Pinning ahead of a foreseen swap-out (node/pinahead.py, docs/protocol.md "Pinning ahead"): the
rule, table-driven, and who the running scheduler tells PREPARE_SWAP on and off, and when: only to
clients that offered HELLO_PIN_AHEAD, once per change, and to nobody with --no-pin-ahead."""

from __future__ import annotations

import pytest

from sched_harness import GiB, MessageType, registered, uuid

from xpushare.scheduler.node.pinahead import likely
from xpushare.scheduler.policy import Mode
from xpushare.wire.protocol import HELLO_PIN_AHEAD, HELLO_SWAP, PrepareSwap, encode_json

B = 100 * GiB  # the budget of the table below; each client's context counts 1 GiB there
AUTO, SERIAL, OFF = Mode.AUTO, Mode.SERIAL, Mode.OFF


@pytest.mark.parametrize("was_on, footprints, budget, mode, on", [
    (False, [70 * GiB], B, AUTO, False),                 # alone: nobody to swap for
    (False, [], B, AUTO, False),
    (False, [70 * GiB, None], B, AUTO, True),            # a newcomer counts as the largest
    (False, [70 * GiB, 0], B, AUTO, False),              # one that reported 0 bytes as 0
    (True, [70 * GiB, 0], B, AUTO, True),                # 72: above 60%, on stays on
    (False, [30 * GiB, None], B, AUTO, False),           # 30 + 30 + 2 fit comfortably
    (False, [30 * GiB, 40 * GiB], B, AUTO, False),       # 72: under three quarters
    (False, [36 * GiB, 38 * GiB], B, AUTO, True),        # 76: past them
    (False, [60 * GiB, 60 * GiB], B, AUTO, True),        # past the budget itself
    (True, [30 * GiB, 30 * GiB], B, AUTO, True),         # 62: on stays on above 60%
    (True, [28 * GiB, 29 * GiB], B, AUTO, False),        # 59: off below
    (False, [30 * GiB, 30 * GiB], B, AUTO, False),       # 62: not turned on by it
    (False, [None, None], B, AUTO, False),               # nothing known of anyone
    (False, [None, None, 80 * GiB], B, AUTO, True),
    (False, [60 * GiB, 60 * GiB], B, SERIAL, True),      # serial: every switch swaps then
    (True, [60 * GiB, 60 * GiB], B, OFF, False),         # mode off never swaps
    (False, [60 * GiB, 60 * GiB], None, AUTO, False),    # capacity unknown
    (False, [60 * GiB, 60 * GiB], 0, AUTO, False),
    (False, [20 * GiB, 20 * GiB, 20 * GiB, None], B, AUTO, True),  # 4 x 20 + 4
    (False, [20 * GiB, 20 * GiB, 20 * GiB, 0], B, AUTO, False),     # 3 x 20 + 4
])
def test_the_rule(was_on, footprints, budget, mode, on):
    assert likely(was_on, footprints, budget, GiB, mode) is on


# --gpu-memory 10GiB: a budget of 9.5 GiB (the 5% reserve), 768 MiB of context per client; on past
# 7.125 GiB of demand, off again under 5.7 GiB.
ARGS = ("--no-nvml", "--gpu-memory", "10GiB", "--log-locks")
OFFERS = HELLO_SWAP | HELLO_PIN_AHEAD


def _next(client) -> PrepareSwap:
    frame = client.recv()
    assert frame is not None and frame.type == MessageType.PREPARE_SWAP, frame
    return PrepareSwap.unpack(frame.payload)


def _footprint(client, gib: float) -> list[PrepareSwap]:
    """A MEM_UPDATE, then a status round trip (the scheduler has handled it once the reply is
    back): the PREPARE_SWAPs sent to this client before the reply."""
    client.mem_update(managed=int(gib * GiB))
    client.send_raw(encode_json(MessageType.CTL_REQUEST, {"op": "status"}))
    told = []
    while (frame := client.recv()) is not None and frame.type == MessageType.PREPARE_SWAP:
        told.append(PrepareSwap.unpack(frame.payload))
    assert frame is not None and frame.type == MessageType.CTL_REPLY, frame
    return told


def test_a_newcomer_beside_a_large_client_turns_it_on_for_both_and_leaving_turns_it_off(start_scheduler):
    sched = start_scheduler(*ARGS)
    first = registered(sched.sock, flags=OFFERS)
    assert _footprint(first, 6) == []                # alone
    old_library = registered(sched.sock, flags=HELLO_SWAP)  # did not offer PIN_AHEAD
    assert _next(first) == PrepareSwap(0, 1)         # its 0 bytes count as 6: 13.5 GiB of demand
    newcomer = registered(sched.sock, flags=OFFERS)
    assert _next(newcomer) == PrepareSwap(0, 1)      # a GPU already on: told at its ATTACH
    assert first.nothing_sent()                      # told once per change
    shown = {c["client_id"]: c["gpus"][0]["pinning_ahead"] for c in first.ctl("status")["clients"]}
    assert shown == {first.client_id: True, newcomer.client_id: True, old_library.client_id: False}
    old_library.close()
    assert _footprint(newcomer, 1) == []             # 6 + 1 + 1.5: still above 60%
    assert first.nothing_sent()
    newcomer.close()                                 # alone again
    assert _next(first) == PrepareSwap(0, 0)
    assert "prepare-swap pid=" in sched.logfile.read_text()


def test_memory_that_fits_comfortably_turns_it_off_and_only_three_quarters_on_again(start_scheduler):
    sched = start_scheduler(*ARGS)
    a, b = registered(sched.sock, flags=OFFERS), registered(sched.sock, flags=OFFERS)
    assert _footprint(a, 3) == [PrepareSwap(0, 1)]   # b counts as 3
    assert _next(b) == PrepareSwap(0, 1)
    assert _footprint(b, 1) == [PrepareSwap(0, 0)]   # 3 + 1 + 1.5 = 5.5: under 5.7
    assert _next(a) == PrepareSwap(0, 0)
    assert _footprint(a, 4.5) == []                  # 7: under 7.125, off stays off
    assert b.nothing_sent()
    assert _footprint(a, 5) == [PrepareSwap(0, 1)]   # 7.5
    assert _next(b) == PrepareSwap(0, 1)


def test_mode_off_turns_it_off_serial_on_again_and_a_larger_capacity_off(start_scheduler):
    sched = start_scheduler(*ARGS)
    a, b = registered(sched.sock, flags=OFFERS), registered(sched.sock, flags=OFFERS)
    assert _footprint(a, 6) == [PrepareSwap(0, 1)]
    assert _next(b) == PrepareSwap(0, 1)
    admin = registered(sched.sock, devices=())       # the control requests' own connection
    assert admin.ctl("set_mode", mode="off")["ok"]
    assert _next(a) == PrepareSwap(0, 0) and _next(b) == PrepareSwap(0, 0)
    assert admin.ctl("set_mode", mode="serial")["ok"]
    assert _next(a) == PrepareSwap(0, 1) and _next(b) == PrepareSwap(0, 1)
    assert admin.ctl("set_gpu_memory", gpu=uuid(0), bytes=64 * GiB)["ok"]  # room enough now
    assert _next(a) == PrepareSwap(0, 0) and _next(b) == PrepareSwap(0, 0)


def test_no_pin_ahead_tells_nobody(start_scheduler):
    sched = start_scheduler(*ARGS, "--no-pin-ahead")
    a, b = registered(sched.sock, flags=OFFERS), registered(sched.sock, flags=OFFERS)
    assert _footprint(a, 6) == [] and _footprint(b, 6) == []
    assert a.nothing_sent()
    assert "prepare-swap" not in sched.logfile.read_text()


def test_a_newcomer_counts_as_the_largest_only_until_it_reports_or_its_window_ends(start_scheduler):
    sched = start_scheduler(*ARGS, "--pin-ahead-newcomer-s", "1")
    first = registered(sched.sock, flags=OFFERS)
    assert _footprint(first, 4) == []
    reporter = registered(sched.sock, flags=OFFERS)
    assert _next(first) == PrepareSwap(0, 1)         # counts as 4 until it says otherwise: 9.5
    assert _next(reporter) == PrepareSwap(0, 1)
    assert _footprint(reporter, 0) == [PrepareSwap(0, 0)]  # 0 bytes reported: 4 + 0 + 1.5
    assert _next(first) == PrepareSwap(0, 0)
    reporter.close()
    idle = registered(sched.sock, flags=OFFERS)      # attaches, never allocates
    assert _next(first) == PrepareSwap(0, 1) and _next(idle) == PrepareSwap(0, 1)
    assert _next(first) == PrepareSwap(0, 0)         # its window over: it counts as nothing
    assert _next(idle) == PrepareSwap(0, 0)
