"""The scheduler's loop is not held by the collector scanning its own code: a full collection
during a fuzzing run held the loop 5-6 ms each time it ran, most of it over objects that live as
long as the daemon (modules, classes, functions). Server.startup freezes what exists once it
serves, so a full collection scans only what was made since."""

import asyncio
import gc

from sched_harness import make_socket_dir
from xpushare.scheduler.shell.server import Config, Server


def test_a_serving_scheduler_leaves_what_existed_at_start_out_of_full_collections():
    sockdir = make_socket_dir()
    gc.unfreeze()
    loop = asyncio.new_event_loop()
    server = Server(Config(socket_path=sockdir / "s.sock"))
    try:
        loop.run_until_complete(server.startup())
        frozen, scanned = gc.get_freeze_count(), len(gc.get_objects())
        assert frozen > 10 * scanned, (frozen, scanned)
    finally:
        loop.run_until_complete(server.shutdown())
        loop.close()
        gc.unfreeze()
