"""The exporter's HTTP endpoint (--metrics-port): GET /metrics and GET /healthz, on the scheduler's
own loop.

Not prometheus_client's HTTP server: that one serves from a thread, and a thread reading the
scheduler's state races the loop that changes it. Here a scrape copies what it shows on the loop
and formats it, both in pieces (metrics_collect.take_pieces, render), returning to the loop between
them, so lock requests are served while a large scrape is made.

The server is deliberately small: HTTP/1.1 (or 1.0), GET only, one request per connection and then
close (what Prometheus needs), the request head at most MAX_REQUEST bytes and complete within
READ_TIMEOUT, at most MAX_CONNECTIONS at once. Anything else gets its 4xx status and is closed; other
connections, and the scheduler, go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from prometheus_client.exposition import choose_encoder

from .metrics_collect import NvmlReader, render, take_pieces

log = logging.getLogger("nvshare.scheduler")

MAX_REQUEST = 8192      # bytes of request line and headers
READ_TIMEOUT = 5.0      # seconds to send them
MAX_CONNECTIONS = 16    # scrapes served at once; Prometheus sends one at a time per target
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 431: "Request Header Fields Too Large",
            503: "Service Unavailable"}


class MetricsServer:
    """Serves the state's metrics on address:port. nvml: read NVML's memory use and utilization
    at each scrape (not with --no-nvml)."""

    def __init__(self, state, address: str, port: int, nvml: bool):
        self.state, self.address, self.port = state, address, port
        self.nvml = NvmlReader() if nvml else None
        self._server: asyncio.AbstractServer | None = None
        self._open = 0

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
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open += 1
        try:
            if self._open > MAX_CONNECTIONS:
                await _respond(writer, 503, b"too many scrapes at once\n")
                return
            status, headers, body = await self._answer(reader)
            await _respond(writer, status, body, headers)
        except (ConnectionError, asyncio.TimeoutError):
            pass  # the peer went away, or would not read: nothing to tell it
        except Exception:  # a bug of ours: lose this scrape, not the scheduler
            log.exception("metrics: internal error serving a request")
        finally:
            self._open -= 1
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[int, dict, bytes]:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
        except asyncio.TimeoutError:
            return 408, {}, b"request not complete in time\n"
        except asyncio.LimitOverrunError:
            return 431, {}, b"request too large\n"
        except asyncio.IncompleteReadError:
            return 400, {}, b"incomplete request\n"
        request = _parse(head)
        if request is None:
            return 400, {}, b"malformed request\n"
        method, path, headers = request
        if method != "GET":
            return 405, {"Allow": "GET"}, b"only GET\n"
        if path == "/healthz":
            return 200, {"Content-Type": "text/plain; charset=utf-8"}, b"ok\n"
        if path == "/metrics":
            body, content_type = await self._scrape(headers.get("accept", ""))
            return 200, {"Content-Type": content_type}, body
        return 404, {}, b"not found: try /metrics or /healthz\n"

    async def _scrape(self, accept: str) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept)
        for scrape in take_pieces(self.state, self.state.registry.now(), self.nvml):
            await asyncio.sleep(0)  # let the loop serve what came meanwhile
        pieces = []
        for piece in render(scrape, encoder, content_type.startswith("application/openmetrics")):
            pieces.append(piece)
            await asyncio.sleep(0)  # let the loop serve what came meanwhile
        return b"".join(pieces), content_type


def _parse(head: bytes) -> tuple[str, str, dict[str, str]] | None:
    """(method, path, headers with lower-case names) of a request head; None if malformed."""
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
    return parts[0], parts[1].split("?", 1)[0], headers


async def _respond(writer: asyncio.StreamWriter, status: int, body: bytes,
                   headers: dict | None = None) -> None:
    lines = [f"HTTP/1.1 {status} {_REASONS[status]}", f"Content-Length: {len(body)}",
             "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {"Content-Type": "text/plain"}).items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
    await asyncio.wait_for(writer.drain(), READ_TIMEOUT)
