"""The exporter's HTTP endpoint (--metrics-port): GET /metrics and GET /healthz, on the scheduler's
own loop.

Not prometheus_client's HTTP server: that one serves from a thread, and a thread reading the
scheduler's state races the loop that changes it. Here the answer is made on the loop a slice at a
time, once for all the scrapes that come while it is fresh (exposition.py), so lock requests are
served while a large scrape is made, however many scrapers there are.

The server is deliberately small: HTTP/1.1 (or 1.0), GET only, one request per connection and then
close (what Prometheus needs). Anything else gets its 4xx status and is closed; other connections,
and the scheduler, go on. Whatever other connections do, a scrape that sends its request and reads
its answer gets through:
- the request head is at most MAX_REQUEST bytes and complete within HEAD_TIMEOUT of the connect;
- at most MAX_CONNECTIONS at once, MAX_PER_PEER from one address; when a new connection would pass
  either, the connection (of that address, or of all) that has waited longest on its peer (for the
  rest of its head, or for it to read) is dropped for it, or if none waits, the oldest. A peer
  that is slow to send or to read thus cannot hold slots against one that is not, and one address
  cannot take the slots of others;
- one answer per format is made at a time, and kept while fresh (exposition.py): the copies and
  the loop's time do not grow with the connections;
- all answers together are written at most OUTPUT_RATE bytes a second (a burst of OUTPUT_BURST),
  so that scrapers asking in a loop for a shared answer cost the loop a bounded share of its time
  however many they are; a connection waits for that budget only while it writes, never while its
  peer does not read. An answer is written a chunk at a time, and the next chunk only once the
  socket's buffer is under WRITE_BUFFER. A peer that reads nothing for WRITE_TIMEOUT, or has not
  read it all within RESPONSE_DEADLINE of its request, is dropped.
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client.exposition import choose_encoder

from .exposition import Expositions
from .nvml_reader import NvmlReader

log = logging.getLogger("nvshare.scheduler")

MAX_REQUEST = 8192          # bytes of request line and headers
HEAD_TIMEOUT = 5.0          # seconds from the connect to send them
MAX_CONNECTIONS = 32        # connections at once; Prometheus sends one scrape at a time per target
MAX_PER_PEER = 8            # of them from one address
OUTPUT_RATE = 32 << 20      # bytes a second of all answers together (a 12 MB answer: 0.4 s)
OUTPUT_BURST = 1 << 20      # ... of which at once
WRITE_BUFFER = 64 * 1024    # bytes of answer kept for one connection before waiting for it to read
WRITE_TIMEOUT = 5.0         # seconds a peer may read nothing while its answer waits
RESPONSE_DEADLINE = 60.0    # seconds from the head to the end of the answer
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 431: "Request Header Fields Too Large"}


class _Conn:
    """One connection's slot: whose it is, and since when (loop time) it waits on its peer."""
    __slots__ = ("peer", "writer", "task", "admitted", "waiting_since")

    def __init__(self, peer, writer, task, now: float):
        self.peer, self.writer, self.task, self.admitted = peer, writer, task, now
        self.waiting_since: float | None = now  # the head is awaited from the connect

    def drop(self) -> None:
        self.writer.transport.abort()  # frees its buffer now; the task ends at its next await
        self.task.cancel()


class MetricsServer:
    """Serves the state's metrics on address:port. nvml: read NVML's memory use and utilization
    when an answer is made (not with --no-nvml); max_age: how long an answer answers the scrapes
    that come after it (exposition.py)."""

    def __init__(self, state, address: str, port: int, nvml: bool, max_age: float = 0.0):
        self.state, self.address, self.port = state, address, port
        self.nvml = NvmlReader() if nvml else None
        self.expositions = Expositions(state, self.nvml, max_age)
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[_Conn] = set()
        self._output = _Pace(OUTPUT_RATE, OUTPUT_BURST)

    async def start(self) -> None:
        if self.nvml is not None:
            self.nvml.open()
        self._server = await asyncio.start_server(self._serve, self.address, self.port,
                                                  limit=MAX_REQUEST)
        log.info("metrics on http://%s:%d/metrics", self.address, self.bound_port)

    @property
    def bound_port(self) -> int:
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Close the port and drop every connection; nothing waits for them (server.shutdown)."""
        if self._server is not None:
            self._server.close()
            for conn in list(self._conns):
                conn.drop()

    def _admit(self, peer, writer) -> _Conn:
        """The new connection's slot, after making room when its peer has MAX_PER_PEER (among
        those of the peer) or all have MAX_CONNECTIONS (among all): the connection that has
        waited longest on its peer is dropped, or if none waits, the oldest."""
        mine = [c for c in self._conns if c.peer == peer]
        crowd = mine if len(mine) >= MAX_PER_PEER else (
            self._conns if len(self._conns) >= MAX_CONNECTIONS else None)
        if crowd:
            waiting = [c for c in crowd if c.waiting_since is not None]
            victim = (min(waiting, key=lambda c: c.waiting_since) if waiting
                      else min(crowd, key=lambda c: c.admitted))
            self._conns.discard(victim)
            victim.drop()
        conn = _Conn(peer, writer, asyncio.current_task(), asyncio.get_running_loop().time())
        self._conns.add(conn)
        return conn

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        conn = self._admit(peername[0] if isinstance(peername, tuple) else peername, writer)
        done = False
        try:
            writer.transport.set_write_buffer_limits(high=WRITE_BUFFER)
            await self._exchange(conn, reader, writer)
            done = True
        except (ConnectionError, asyncio.TimeoutError):
            pass  # the peer went away, or would not read: nothing to tell it
        except asyncio.CancelledError:
            if conn in self._conns:
                raise  # not dropped by _admit: the scheduler is stopping
        except Exception:  # a bug of ours: lose this scrape, not the scheduler
            log.exception("metrics: internal error serving a request")
        finally:
            self._conns.discard(conn)
            if done:
                writer.close()
            else:  # what is left of its answer would wait for a peer that does not read
                writer.transport.abort()

    async def _exchange(self, conn: _Conn, reader, writer) -> None:
        loop = asyncio.get_running_loop()
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"),
                                          conn.waiting_since + HEAD_TIMEOUT - loop.time())
        except asyncio.TimeoutError:
            return await self._send_all(conn, 408, {}, [b"request not complete in time\n"])
        except asyncio.LimitOverrunError:
            return await self._send_all(conn, 431, {}, [b"request too large\n"])
        except asyncio.IncompleteReadError:
            return await self._send_all(conn, 400, {}, [b"incomplete request\n"])
        conn.waiting_since = None
        request = _parse(head)
        if request is None:
            return await self._send_all(conn, 400, {}, [b"malformed request\n"])
        method, path, headers, version = request
        if method != "GET":
            return await self._send_all(conn, 405, {"Allow": "GET"}, [b"only GET\n"])
        if path == "/healthz":
            return await self._send_all(conn, 200, {"Content-Type": "text/plain; charset=utf-8"},
                                        [b"ok\n"])
        if path != "/metrics":
            return await self._send_all(conn, 404, {}, [b"not found: try /metrics or /healthz\n"])
        encoder, content_type = choose_encoder(headers.get("accept", ""))
        openmetrics = content_type.startswith("application/openmetrics")
        chunked = version == "HTTP/1.1"  # 1.0 has no chunks: its answer ends where the data does
        await asyncio.wait_for(self._answer(conn, encoder, openmetrics, content_type, chunked),
                               RESPONSE_DEADLINE)

    async def _answer(self, conn, encoder, openmetrics: bool, content_type: str,
                      chunked: bool) -> None:
        chunks = await self.expositions.get(encoder, openmetrics)
        await self._stream(conn, {"Content-Type": content_type}, chunks, chunked)

    async def _send_all(self, conn, status: int, headers: dict, body: list[bytes]) -> None:
        """A short answer whose length is known."""
        headers = {"Content-Type": "text/plain", **headers,
                   "Content-Length": str(sum(map(len, body)))}
        conn.writer.write(_head(status, headers) + b"".join(body))
        await self._drained(conn, 0)

    async def _stream(self, conn, headers: dict, pieces, chunked: bool) -> None:
        """A 200 whose body is `pieces`, each sent once the last has mostly gone: in HTTP/1.1
        chunks (a cut-off answer is seen as one), else up to the close."""
        if chunked:
            headers = {**headers, "Transfer-Encoding": "chunked"}
        conn.writer.write(_head(200, headers))
        for piece in pieces:
            if piece:
                await self._output.take(len(piece))
                conn.writer.write(b"%x\r\n%b\r\n" % (len(piece), piece) if chunked else piece)
            await self._drained(conn)  # also lets the loop serve what came meanwhile
        if chunked:
            conn.writer.write(b"0\r\n\r\n")
        await self._drained(conn, 0)

    async def _drained(self, conn, limit: int = WRITE_BUFFER) -> None:
        """Once the connection's buffer holds at most `limit` bytes (0: all is sent, so that the
        close after it leaves nothing behind); TimeoutError if the peer reads nothing for
        WRITE_TIMEOUT. Meanwhile it counts as waiting on its peer."""
        transport = conn.writer.transport
        if transport.is_closing():  # the peer went away: what is left has no one to go to
            raise ConnectionResetError("metrics peer gone")
        if transport.get_write_buffer_size() <= limit:
            await asyncio.sleep(0)
            return
        if limit != WRITE_BUFFER:
            transport.set_write_buffer_limits(high=limit)  # drain() waits for the buffer's low mark
        conn.waiting_since = asyncio.get_running_loop().time()
        await asyncio.wait_for(conn.writer.drain(), WRITE_TIMEOUT)
        conn.waiting_since = None


class _Pace:
    """A byte budget of `rate` a second, at most `burst` saved up, shared by the connections that
    take from it: one that finds it spent waits until its share has come (those after it longer)."""

    def __init__(self, rate: float, burst: float):
        self.rate, self.burst = rate, burst
        self._tokens, self._when = burst, None

    async def take(self, n: int) -> None:
        now = asyncio.get_running_loop().time()
        if self._when is not None:
            self._tokens = min(self.burst, self._tokens + (now - self._when) * self.rate)
        self._when = now
        self._tokens -= n
        if self._tokens < 0:
            await asyncio.sleep(-self._tokens / self.rate)


def _head(status: int, headers: dict) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS[status]}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _parse(head: bytes) -> tuple[str, str, dict[str, str], str] | None:
    """(method, path, headers with lower-case names, version) of a request head; None if
    malformed."""
    try:
        lines = head.decode("latin-1").split("\r\n")
    except UnicodeDecodeError:
        return None
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1") or not parts[1].startswith("/"):
        return None
    headers = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return None
        headers[name.lower()] = value.strip()
    return parts[0], parts[1].split("?", 1)[0], headers, parts[2]
