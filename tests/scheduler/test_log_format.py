"""nvshare-scheduler --log-format json: one JSON object per line, with the text line's fields."""

import json
import os

import pytest

from sched_harness import registered
from xpushare.wire.protocol import MessageType
from xpushare.scheduler.shell.logformat import JsonFormatter


def test_every_line_is_one_json_object_with_the_events_fields(start_scheduler):
    s = start_scheduler("--no-nvml", "--mode", "serial", "--log-format", "json")
    with registered(s.sock) as c:
        c.request()
        c.expect(MessageType.LOCK_OK)
        c.release()
    s.wait_log('"event":"disconnect"')
    lines = [json.loads(line) for line in s.log().splitlines()]  # every line parses
    assert all({"time", "level", "logger", "message"} <= set(o) for o in lines)
    grant = next(o for o in lines if o.get("event") == "grant")
    assert grant["pid"] == os.getpid() and grant["level"] == "INFO"
    assert grant["logger"] == "nvshare.scheduler.locks" and grant["prefetch"] == "no"
    release = next(o for o in lines if o.get("event") == "release")
    assert release["reason"] == "dropped" and release["held"].endswith("s")  # FakeClient's reason 0
    assert any(o.get("event") == "attach" and o["pid"] == os.getpid() for o in lines)


@pytest.mark.parametrize("message, fields", [
    ("grant pid=41 gpu=0 quantum=5s prefetch=no",
     {"event": "grant", "pid": 41, "gpu": "0", "quantum": "5s", "prefetch": "no"}),
    ("pid=7: protocol error: bad magic; closing its connection", {"pid": 7}),
    ("shutting down", {}),
    ("ctl set_tq from pid=3 uid=0: ok", {"pid": 3, "uid": 0}),
    ("attach pid=5 uid=1 client=2 priority=-3 device=0 gpu=0 capacity=8: python x=1 level=9",
     {"event": "attach", "pid": 5, "uid": 1, "client": 2, "priority": -3, "device": 0, "gpu": "0",
      "capacity": 8}),  # a command line's words are not fields; its "level" is not the record's
    ("disconnect pid=5 uid=1 client=2 priority=0, attached no GPU: python gpu=7 device=1 capacity=1",
     {"event": "disconnect", "pid": 5, "uid": 1, "client": 2, "priority": 0}),
])
def test_fields_are_read_from_the_message(message, fields):
    import logging
    record = logging.LogRecord("nvshare.scheduler", logging.INFO, __file__, 1, message, (), None)
    obj = json.loads(JsonFormatter().format(record))
    assert obj["message"] == message and obj["level"] == "INFO"
    assert {k: v for k, v in obj.items() if k not in ("time", "level", "logger", "message")} == fields
