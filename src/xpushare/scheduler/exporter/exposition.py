"""The /metrics answer, made once for all the scrapes that come within its freshness, a slice at a
time on the scheduler's slicer (node/slicer.py, which status replies share).

Made per scrape, the answer's cost grew with the scrapers: each one formatted the whole state again
(hundreds of milliseconds of the loop's time at thousands of clients), and 32 scrapers took turns
on the loop faster than lock messages were read. Here one exposition per format (the Prometheus
text format, OpenMetrics) is made at a time: the copy of the state (metrics_collect.take_pieces)
and its formatting (render) run as one slicer job, so that what a scrape costs the loop in one
turn is at most the slicer's slice, however many scrapes come at once. The answer is kept as
CHUNK-sized byte strings, and answers the scrapes that come while it is fresh: for max_age
seconds from when its copy began (--metrics-max-age), or for FRESH_FACTOR times as long as it
took to make, whichever is longer, so that scrapes back to back spend at most about a fifth of
the loop's time making answers. With max_age 0 an answer is only shared by the scrapes that came
while it was being made (each of those is answered with the state as it was at most one making's
time before its request).
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator

from .metrics_collect import render, take_pieces

CHUNK = 64 * 1024   # bytes of an answer written at once (and one HTTP/1.1 chunk)
FRESH_FACTOR = 4.0  # an answer stays fresh at least this many times as long as it took to make


class Exposition:
    """One made answer: its chunks, when its copy began (loop time) and how long making it took."""
    __slots__ = ("chunks", "started", "took")

    def __init__(self, chunks: list[bytes], started: float, took: float):
        self.chunks, self.started, self.took = chunks, started, took

    def fresh_for(self, max_age: float) -> float:
        """Seconds from `started` during which it answers scrapes (0: none after it is made)."""
        return max(max_age, FRESH_FACTOR * self.took) if max_age > 0 else 0.0


class Expositions:
    """The answers of one scheduler (state: its SchedulerState; nvml: an NvmlReader or None)."""

    def __init__(self, state, nvml, max_age: float):
        self.state, self.nvml, self.max_age = state, nvml, max_age
        self._made: dict[bool, Exposition] = {}            # openmetrics -> the latest answer
        self._making: dict[bool, asyncio.Future] = {}      # openmetrics -> the one in the making

    async def get(self, encoder, openmetrics: bool) -> list[bytes]:
        """The chunks of a fresh answer in the format asked for (encoder: prometheus_client's
        generate_latest of it): the one kept, the one being made, or a new one."""
        loop = asyncio.get_running_loop()
        made = self._made.get(openmetrics)
        if made is not None and loop.time() < made.started + made.fresh_for(self.max_age):
            return made.chunks
        making = self._making.get(openmetrics)
        if making is None:
            making = self._making[openmetrics] = loop.create_future()
            started = loop.time()
            job = _make(self.state, self.nvml, encoder, openmetrics)
            self.state.slicer.submit(
                loop, job, lambda chunks: self._made_one(openmetrics, making, started, chunks))
        # shielded: a connection dropped meanwhile leaves the answer to the others waiting for it
        return await asyncio.shield(making)

    def _made_one(self, openmetrics: bool, making: asyncio.Future, started: float,
                  chunks: list[bytes] | None) -> None:
        del self._making[openmetrics]
        if chunks is None:  # the slicer logged why
            making.set_exception(RuntimeError("the metrics exposition could not be made"))
            making.exception()  # seen here when nobody waits for it any more
            return
        loop = asyncio.get_running_loop()
        made = Exposition(chunks, started, loop.time() - started)
        making.set_result(chunks)
        fresh_for = made.fresh_for(self.max_age)
        if fresh_for > 0:  # kept while fresh, then let go (megabytes at thousands of clients)
            self._made[openmetrics] = made
            loop.call_at(started + fresh_for, self._expired, openmetrics, made)

    def _expired(self, openmetrics: bool, made: Exposition) -> None:
        if self._made.get(openmetrics) is made:
            del self._made[openmetrics]


def _make(state, nvml, encoder, openmetrics: bool) -> Generator[None, None, list[bytes]]:
    """The slicer job: the copy a piece a step, then the text a piece a step, joined into
    CHUNK-sized byte strings as it goes (so that writing it costs a few calls per connection, not
    one per family piece)."""
    scrape = None
    for scrape in take_pieces(state, state.registry.now(), nvml):
        yield
    chunks: list[bytes] = []
    pending: list[bytes] = []
    size = 0
    for piece in render(scrape, encoder, openmetrics):
        pending.append(piece)
        size += len(piece)
        if size >= CHUNK:
            chunks.append(b"".join(pending))
            pending, size = [], 0
        yield
    if pending:
        chunks.append(b"".join(pending))
    return chunks
