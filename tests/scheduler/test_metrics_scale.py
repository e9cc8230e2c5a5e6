"""The exporter with many clients, in process: the exposition a scrape writes in pieces is still one
valid exposition (each family once, every client's series there) in both formats; many scrapes at
once format the state once, a slice of the loop per turn.

Run as a script, it times a scrape's work on the loop at 1000 clients (the copy of live state, and
the longest piece of formatting between two returns to the loop):
    python tests/scheduler/test_metrics_scale.py [CLIENTS]
"""

from __future__ import annotations

import asyncio
import collections
import os
import sys
import time
from pathlib import Path

import sched_harness  # noqa: E402,F401 - puts the checkout's src/ on the path

from prometheus_client.exposition import choose_encoder  # noqa: E402
from prometheus_client.openmetrics.parser import (  # noqa: E402
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text  # noqa: E402

from xpushare.scheduler.shell.connection import Conn  # noqa: E402
from xpushare.scheduler.exporter.metrics_collect import PIECE_SAMPLES, render, take, take_pieces  # noqa: E402
from xpushare.scheduler.policy import Mode  # noqa: E402
from xpushare.scheduler.node.state import Config, SchedulerState  # noqa: E402

GiB = 1 << 30
OPENMETRICS = "application/openmetrics-text; version=1.0.0"


class SilentTransport:
    def write(self, data):
        pass

    def is_closing(self):
        return False

    def get_write_buffer_size(self):
        return 0

    def close(self):
        pass


def busy_state(loop, clients: int) -> SchedulerState:
    """One serial GPU: a holder, the rest waiting, each with a memory report."""
    state = SchedulerState(Config(socket_path=Path("/nonexistent/s.sock"), mode=Mode.SERIAL, tq=30),
                           [])
    state.registry.start(loop)
    gpu = state.registry.add(sched_harness.uuid(0), 0, "Mock GPU", 16 * GiB)
    for i in range(clients):
        conn = Conn(state.next_id(), SilentTransport(), os.getpid(), os.getuid(), os.getgid())
        conn.hello = object()  # a client, for state.clients()
        conn.devices[0] = gpu
        conn.memory[gpu.uuid] = (i << 20, 1 << 20)
        state.connected(conn)
        state.registry.apply(gpu, gpu.arbiter.request, conn)
    return state


def exposition(state, accept: str = "") -> str:
    encoder, ctype = choose_encoder(accept)
    scrape = take(state, state.registry.now())
    return b"".join(render(scrape, encoder, ctype.startswith("application/openmetrics"))).decode()


def test_pieces_make_one_exposition_in_both_formats():
    loop = asyncio.new_event_loop()
    try:
        n = 2 * PIECE_SAMPLES + 7  # three pieces or more of every client family
        state = busy_state(loop, n)
        for parse, accept in ((parse_text, ""), (parse_openmetrics, OPENMETRICS)):
            families = list(parse(exposition(state, accept)))
            names = [f.name for f in families]
            assert len(names) == len(set(names)), names
            by_name = {f.name: f for f in families}
            assert len(by_name["xpushare_client_priority"].samples) == n
            assert len(by_name["xpushare_client_memory_bytes"].samples) == 2 * n
            grants = [s for s in by_name["xpushare_client_lock_grants"].samples
                      if s.name.endswith("_total")]
            assert sum(s.value for s in grants) == 1  # serial: one holder, the rest wait
            waiters = by_name["xpushare_gpu_lock_waiters"].samples
            assert [s.value for s in waiters] == [n - 1]
    finally:
        loop.close()


async def _scrape(port: int, source: str = "127.0.0.1") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    writer.write(b"GET /metrics HTTP/1.1\r\n\r\n")
    answer = await reader.read()
    writer.close()
    return answer


def test_scrapes_at_once_are_formatted_once_a_slice_per_loop_turn(monkeypatch):
    """16 scrapes (from 4 addresses) of 300 clients' series at once: the state is formatted once for them all, and in
    no turn of the loop more than the slicer's one step (SLICE_S 0: one step a turn), where
    formatting per connection put a piece of every connection's answer in each turn."""
    from xpushare.scheduler.exporter import metrics_collect
    from xpushare.scheduler.exporter.httpd import MetricsServer
    from xpushare.scheduler.node import slicer

    monkeypatch.setattr(slicer, "SLICE_S", 0.0)
    turns, encoded = [0], []
    encode = metrics_collect._encode

    def counted(encoder, families):
        encoded.append(turns[0])
        return encode(encoder, families)
    monkeypatch.setattr(metrics_collect, "_encode", counted)

    async def run():
        loop = asyncio.get_running_loop()

        def turn():
            turns[0] += 1
            loop.call_soon(turn)
        loop.call_soon(turn)
        state = busy_state(loop, 300)
        server = MetricsServer(state, "127.0.0.1", 0, nvml=False)
        await server.start()
        one = await _scrape(server.bound_port)
        per_exposition = len(encoded)
        encoded.clear()
        answers = await asyncio.gather(*(_scrape(server.bound_port, f"127.0.0.{1 + i % 4}")
                                         for i in range(16)))
        await server.stop()
        return one, per_exposition, answers

    one, per_exposition, answers = asyncio.run(run())
    assert one.startswith(b"HTTP/1.1 200 ") and one.count(b"xpushare_client_priority{") == 300
    assert all(a.startswith(b"HTTP/1.1 200 ") and a.count(b"xpushare_client_priority{") == 300
               for a in answers)
    assert len(encoded) <= 2 * per_exposition  # they came while one or two were made
    assert max(collections.Counter(encoded).values()) == 1


def test_the_copy_of_the_clients_is_nothing_the_collector_keeps_tracking():
    """The copy lives for the whole answer, over many slices: thousands of objects the collector
    tracks, promoted to its oldest generation at each scrape, set off full collections of the whole
    daemon (60-160 ms at 5000 clients); plain tuples of numbers and strings it stops tracking."""
    import gc

    loop = asyncio.new_event_loop()
    try:
        state = busy_state(loop, 50)
        scrape = take(state, state.registry.now())
        gc.collect()  # two passes, as a row's collections of the young generations before the
        gc.collect()  # oldest (a tuple is let go once what it holds has been)
        assert len(scrape.clients) == 50
        assert not [row for row in scrape.clients if gc.is_tracked(row)]
    finally:
        loop.close()


def test_an_answer_answers_the_scrapes_of_its_max_age_then_a_new_one_is_made():
    from xpushare.scheduler.exporter.httpd import MetricsServer

    async def run():
        loop = asyncio.get_running_loop()
        state = busy_state(loop, 3)
        server = MetricsServer(state, "127.0.0.1", 0, nvml=False, max_age=0.3)
        await server.start()
        first = await _scrape(server.bound_port)
        state.registry.gpus[next(iter(state.registry.gpus))].capacity_override = 8 * GiB
        again = await _scrape(server.bound_port)  # within its max age: the same answer
        await asyncio.sleep(0.4)
        later = await _scrape(server.bound_port)
        await server.stop()
        return first, again, later

    first, again, later = asyncio.run(run())
    capacity = b"xpushare_gpu_capacity_bytes{"
    line = [x for x in first.split(b"\n") if x.startswith(capacity)]
    assert line == [x for x in again.split(b"\n") if x.startswith(capacity)]
    assert line[0].endswith(b" 1.7179869184e+10")
    assert [x for x in later.split(b"\n") if x.startswith(capacity)][0].endswith(b" 8.589934592e+09")


def test_all_answers_together_are_written_within_the_output_budget(monkeypatch):
    """Scrapers asking for a shared answer in a loop are paced together (httpd.OUTPUT_RATE): 4 MiB
    of answers at 4 MiB a second with 1 MiB saved up take at least 0.75 s, whoever asks."""
    from xpushare.scheduler.exporter import exposition, httpd

    monkeypatch.setattr(httpd, "OUTPUT_RATE", 4 << 20, raising=False)
    monkeypatch.setattr(httpd, "OUTPUT_BURST", 1 << 20, raising=False)
    piece = b"# " + b"x" * (64 * 1024 - 3) + b"\n"

    def make(state, nvml, encoder, openmetrics):
        yield
        return [piece] * 16  # 1 MiB
    monkeypatch.setattr(exposition, "_make", make)

    async def run():
        state = busy_state(asyncio.get_running_loop(), 1)
        server = httpd.MetricsServer(state, "127.0.0.1", 0, nvml=False, max_age=60)
        await server.start()
        t0 = time.perf_counter()
        answers = await asyncio.gather(*(_scrape(server.bound_port, f"127.0.0.{1 + i}")
                                         for i in range(4)))
        took = time.perf_counter() - t0
        await server.stop()
        return answers, took

    answers, took = asyncio.run(run())
    assert all(a.startswith(b"HTTP/1.1 200 ") and len(a) > 1 << 20 for a in answers)
    assert took >= 0.7, took


def scrape_cost(clients: int, rounds: int = 20) -> dict[str, float]:
    """Milliseconds: the longest piece of the copy of state (take_pieces), the longest piece of
    formatting (render), a whole scrape; at least `rounds` times (the shortest, the longest)."""
    loop = asyncio.new_event_loop()
    state = busy_state(loop, clients)
    encoder, _ = choose_encoder("")
    takes, pieces, totals = [], [], []
    for _ in range(rounds):
        t0 = last = time.perf_counter()
        for scrape in take_pieces(state, state.registry.now()):
            now = time.perf_counter()
            takes.append(now - last)
            last = now
        for _ in render(scrape, encoder, False):
            now = time.perf_counter()
            pieces.append(now - last)
            last = now
        totals.append(last - t0)
    loop.close()
    ms = 1e3
    return {"take_piece_max": max(takes) * ms, "render_piece_max": max(pieces) * ms,
            "render_piece_median": sorted(pieces)[len(pieces) // 2] * ms,
            "render_piece_p99": sorted(pieces)[len(pieces) * 99 // 100] * ms,
            "scrape_total_min": min(totals) * ms}


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    print(f"{n} clients:", {k: round(v, 3) for k, v in scrape_cost(n).items()}, "(ms)")
