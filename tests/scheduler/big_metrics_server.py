"""A metrics endpoint (scheduler/httpd.MetricsServer) whose /metrics answer is BODY_MB MiB, for
tests of what peers that do not read cost it: `python big_metrics_server.py BODY_MB WRITE_TIMEOUT`
prints its port, then serves until killed. The body is one 64 KiB piece over and over, so what the
process holds beyond it is what it buffers for its peers."""

from __future__ import annotations

import asyncio
import sys


from xpushare.scheduler.exporter import exposition, httpd  # noqa: E402
from xpushare.scheduler.node.slicer import Slicer  # noqa: E402

PIECE = b"# " + b"x" * (64 * 1024 - 3) + b"\n"


class _State:
    slicer = Slicer()

    class registry:  # noqa: N801 - stands in for the scheduler's registry
        @staticmethod
        def now() -> float:
            return 0.0


async def main(body_mb: int, write_timeout: float) -> None:
    def make(state, nvml, encoder, openmetrics):
        yield
        return [PIECE] * (body_mb * 16)
    exposition._make = make
    httpd.WRITE_TIMEOUT = write_timeout
    server = httpd.MetricsServer(_State(), "127.0.0.1", 0, nvml=False)
    await server.start()
    print(server.bound_port, flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), float(sys.argv[2])))
