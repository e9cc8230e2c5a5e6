"""The hold a latency-sensitive client's bursts put on the other clients of its GPU (node/latency.py,
docs/protocol.md "Latency-sensitive clients"): BURSTS on to the latency-sensitive client, HOLD to the
others while it reports a burst, HOLD 0 when the burst ends or its client leaves; a BURST from a
client that is not latency-sensitive holds nobody."""

from __future__ import annotations

from sched_harness import MessageType, registered

from xpushare.wire.protocol import (
    HELLO_HOLD, HELLO_LATENCY_SENSITIVE, Burst, Bursts, Hold, encode,
)

SENSITIVE = HELLO_LATENCY_SENSITIVE | HELLO_HOLD
OTHER_GPU = "GPU-00000000-0000-0000-0000-000000000009"


def _next(client, cls):
    frame = client.recv()
    assert frame is not None and frame.type == MessageType[cls.__name__.upper()], frame
    return cls.unpack(frame.payload)


def _burst(client, active: bool, device: int = 0):
    client.send_raw(encode(Burst(device, int(active))))
    client.nothing_sent()  # a round trip: the scheduler has handled the BURST


def test_a_burst_holds_the_other_clients_of_its_gpu_until_it_ends(start_scheduler):
    sched = start_scheduler("--no-nvml", "--latency-hold-ms", "7.5")
    training = registered(sched.sock, flags=HELLO_HOLD)
    old_library = registered(sched.sock)                  # did not offer HELLO_HOLD
    elsewhere = registered(sched.sock, devices=(), flags=HELLO_HOLD)
    elsewhere.attach(0, gpu_uuid=OTHER_GPU)
    server = registered(sched.sock, flags=SENSITIVE)
    assert _next(server, Bursts) == Bursts(0, 1)          # it reports its bursts from now on
    assert training.nothing_sent()                        # attached, nobody in a burst: no hold

    _burst(server, True)
    assert _next(training, Hold) == Hold(0, 7500)
    _burst(server, True)                                  # a repeat changes nothing
    assert training.nothing_sent()
    _burst(server, False)
    assert _next(training, Hold) == Hold(0, 0)
    assert old_library.nothing_sent() and elsewhere.nothing_sent() and server.nothing_sent()

    _burst(server, True)                                  # leaving mid-burst ends the hold
    assert _next(training, Hold) == Hold(0, 7500)
    server.close()
    assert _next(training, Hold) == Hold(0, 0)
    mine = next(c for c in training.ctl("status")["clients"] if c["client_id"] == training.client_id)
    assert mine["held"]["count"] == 2 and 0 < mine["held"]["seconds"] <= 2 * 0.0075


def test_two_latency_sensitive_clients_hold_the_others_while_either_is_in_a_burst(start_scheduler):
    sched = start_scheduler("--no-nvml")
    training = registered(sched.sock, flags=HELLO_HOLD)
    first, second = (registered(sched.sock, flags=SENSITIVE) for _ in range(2))
    for server in (first, second):
        assert _next(server, Bursts) == Bursts(0, 1)
    _burst(first, True)
    assert _next(training, Hold) == Hold(0, 50000)        # the default --latency-hold-ms
    _burst(second, True)
    _burst(first, False)                                  # the second's burst goes on
    assert training.nothing_sent()
    assert first.nothing_sent() and second.nothing_sent()  # they never hold each other
    _burst(second, False)
    assert _next(training, Hold) == Hold(0, 0)


def test_a_burst_of_a_client_that_is_not_latency_sensitive_holds_nobody(start_scheduler):
    sched = start_scheduler("--no-nvml")
    training = registered(sched.sock, flags=HELLO_HOLD)
    pretender = registered(sched.sock, flags=HELLO_HOLD)  # never sent BURSTS
    admin = registered(sched.sock, devices=())
    _burst(pretender, True)
    assert training.nothing_sent() and pretender.nothing_sent()
    assert "not latency-sensitive; ignored" in sched.logfile.read_text()
    # made latency-sensitive live, then taken back mid-burst: the hold ends with it
    assert admin.ctl("set_latency_sensitive", value="on", client_id=pretender.client_id)["ok"]
    assert _next(pretender, Bursts) == Bursts(0, 1)
    _burst(pretender, True)
    assert _next(training, Hold) == Hold(0, 50000)
    assert admin.ctl("set_latency_sensitive", value="off", client_id=pretender.client_id)["ok"]
    assert _next(training, Hold) == Hold(0, 0)
    assert _next(pretender, Bursts) == Bursts(0, 0)


def test_no_holds_with_a_hold_of_zero(start_scheduler):
    sched = start_scheduler("--no-nvml", "--latency-hold-ms", "0")
    training = registered(sched.sock, flags=HELLO_HOLD)
    server = registered(sched.sock, flags=SENSITIVE)
    assert _next(server, Bursts) == Bursts(0, 1)
    _burst(server, True)
    _burst(server, False)
    assert training.nothing_sent()


def test_nvsharectl_status_shows_how_often_a_client_was_held():
    from xpushare.cli.ctl_render import quota_cell
    assert quota_cell({"quota": {}, "held": {"count": 12, "seconds": 0.0341}, "gpus": []}) == \
        "held 12x 0.0341s"
    assert quota_cell({"quota": {}, "held": {"count": 0, "seconds": 0.0}, "gpus": []}) == "-"
