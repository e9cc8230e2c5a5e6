"""`nvsharectl status` at many clients: a control reply may be larger than the 64 KiB frames peers
send the scheduler (protocol.MAX_CTL_REPLY), so status lists every client with its whole command line
where it used to fail ("reply too large for one frame") at about 390 clients."""

import json
import os
import time

from sched_harness import registered
from xpushare.cli.client import CtlClient
from xpushare.wire.protocol import MAX_PAYLOAD
from xpushare.scheduler.node import peer
from xpushare.scheduler.control.status import COMMAND_MAX

CLIENTS = 600


def test_status_lists_hundreds_of_clients_in_one_reply(scheduler):
    clients = []
    try:
        for _ in range(CLIENTS):
            clients.append(registered(scheduler.sock))
        with CtlClient(scheduler.sock) as ctl:
            t0 = time.monotonic()
            reply = ctl.request("status")
            took = time.monotonic() - t0
        assert reply["ok"], reply
        assert len(reply["clients"]) == CLIENTS
        assert len(json.dumps(reply)) > MAX_PAYLOAD  # it could not have been one 64 KiB frame
        # whole (up to status.COMMAND_MAX, which a long pytest command line can pass), not shortened
        assert {c["command"] for c in reply["clients"]} == {peer.cmdline(os.getpid())[:COMMAND_MAX]}
        print(f"status of {CLIENTS} clients: {took * 1e3:.1f} ms")
    finally:
        for c in clients:
            c.close()
