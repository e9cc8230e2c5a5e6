"""A node of four GPUs from (fake) NVML with load on three of them, for the `place` op and
nvshare-run --gpus tests: which GPU is least loaded is known by construction."""

from __future__ import annotations

import contextlib

from sched_harness import FakeClient, GiB, registered, uuid
from xpushare.cli.client import CtlClient
from xpushare.wire.protocol import MessageType

FOUR = [{"uuid": uuid(i), "name": "Fake H100 80GB HBM3", "memory": 80 * GiB} for i in range(4)]
ARGS = ("--mode", "serial", "--tq", "30")  # serial: a second client waits; 30 s: nothing moves
ORDER = [2, 3, 1, 0]  # least loaded first (see loaded_gpus)


def client_on(sock, gpu: int, memory: int = 0) -> FakeClient:
    c = registered(sock, devices=())
    c.attach(0, uuid(gpu))
    c.mem_update(0, memory, 0)
    return c


@contextlib.contextmanager
def loaded_gpus(sock):
    """GPU 0: a holder and a waiter, each limited to 10% of the GPU's time; GPU 1: an idle client
    using 30 GiB, no compute limit; GPU 2: nothing; GPU 3: an idle client limited to 25%. Yields a
    control client of the scheduler at `sock` (started with ARGS and nvml=FOUR)."""
    clients = [client_on(sock, 0, GiB), client_on(sock, 0, GiB), client_on(sock, 1, 30 * GiB),
               client_on(sock, 3)]
    try:
        clients[0].request()
        clients[0].expect(MessageType.LOCK_OK)
        clients[1].request()
        with CtlClient(sock) as ctl:
            for c, pct in ((clients[0], 10), (clients[1], 10), (clients[3], 25)):
                assert ctl.request("set_compute_limit", value=pct, client_id=c.client_id)["ok"]
            for c in clients:  # a round trip each: their MEM_UPDATE and REQ_LOCK have been handled
                c.nothing_sent()
            yield ctl
    finally:
        for c in clients:
            c.close()
