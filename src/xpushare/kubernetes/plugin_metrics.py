"""The device plugin's own Prometheus series (--metrics-port): GET /metrics and GET /healthz.

PluginStats holds the counters; the gRPC handlers and the watch loop bump them under one lock, and
it needs nothing but the standard library. The exporter (serve) imports prometheus_client only when
--metrics-port is given. It serves from a thread of its own, which is safe here: a scrape reads a
copy of the counters taken under their lock, and of the device health taken under DeviceState's
condition, so each scrape is a consistent snapshot. Only this registry is served, not
prometheus_client's default one: no process_* or python_* series (a Kubernetes node has cAdvisor
for those), and nothing that another library might register.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Callable, Dict, Optional
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from .. import __version__

log = logging.getLogger("nvshare-device-plugin")


class PluginStats:
    """Counters and gauges of the plugin's events; every method is thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._values: Dict[str, int] = {"allocations": 0, "allocations_refused": 0,
                                        "allocated_devices": 0, "registrations": 0,
                                        "registration_failures": 0, "streams": 0}

    def _add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._values[key] += n

    def allocated(self, devices: int) -> None:
        with self._lock:
            self._values["allocations"] += 1
            self._values["allocated_devices"] += devices

    def allocation_refused(self) -> None:
        self._add("allocations_refused")

    def registered(self) -> None:
        self._add("registrations")

    def registration_failed(self) -> None:
        self._add("registration_failures")

    def stream_opened(self) -> None:
        self._add("streams")

    def stream_closed(self) -> None:
        self._add("streams", -1)

    def snapshot(self) -> Dict[str, int]:
        with self._lock:
            return dict(self._values)


class PluginCollector:
    """prometheus_client collector: the xpushare_plugin_* series from stats and a DeviceState."""

    def __init__(self, stats: PluginStats, state, resource: str):
        self.stats, self.state, self.resource = stats, state, resource

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
        values = self.stats.snapshot()
        with self.state.cond:  # the health of every GPU as of one moment
            health = {g.uuid: self.state.healthy_locked(g.uuid) for g in self.state.gpus}
        units, res = self.state.units, [self.resource]

        def gauge(name, doc, value, labels=(), label_values=()):
            m = GaugeMetricFamily(f"xpushare_plugin_{name}", doc, labels=list(labels))
            m.add_metric(list(label_values), value)
            return m

        def counter(name, doc, value, labels=(), label_values=()):
            m = CounterMetricFamily(f"xpushare_plugin_{name}", doc, labels=list(labels))
            m.add_metric(list(label_values), value)
            return m

        yield InfoMetricFamily("xpushare_plugin_build", "the device plugin's version",
                               value={"version": __version__})
        yield gauge("devices", "devices advertised to the kubelet (units of the resource)",
                    units * len(health), ["resource"], res)
        yield gauge("devices_healthy", "advertised devices that are Healthy",
                    units * sum(health.values()), ["resource"], res)
        yield gauge("gpus", "physical GPUs the plugin shares", len(health))
        info = InfoMetricFamily("xpushare_plugin_gpu", "a physical GPU the plugin shares",
                                labels=["uuid", "index", "numa_node"])
        healthy = GaugeMetricFamily("xpushare_plugin_gpu_healthy",
                                    "1 while the GPU is Healthy, 0 while Unhealthy", labels=["uuid"])
        for g in self.state.gpus:
            numa = "" if g.numa_node is None else str(g.numa_node)
            info.add_metric([g.uuid, str(g.index), numa], {})
            healthy.add_metric([g.uuid], 1 if health[g.uuid] else 0)
        yield info
        yield healthy
        yield counter("allocations", "Allocate calls answered", values["allocations"],
                      ["resource"], res)
        yield counter("allocations_refused", "Allocate calls refused (unknown device, two units "
                      "of one GPU, library missing)", values["allocations_refused"], ["resource"], res)
        yield counter("allocated_devices", "devices handed out by answered Allocate calls",
                      values["allocated_devices"])
        yield counter("registrations", "registrations with the kubelet, again after each kubelet "
                      "restart", values["registrations"])
        yield counter("registration_failures", "registration attempts the kubelet refused or did "
                      "not answer", values["registration_failures"])
        yield gauge("list_and_watch_streams", "open ListAndWatch streams (the kubelet holds one)",
                    values["streams"])


# ---------------------------------------------------------------------------------------------
# the HTTP endpoint

class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass  # one line per scrape would drown the plugin's log


def make_app(registry, healthy: Callable[[], bool]):
    """WSGI app: /metrics from registry (OpenMetrics when the Accept header asks for it), /healthz
    (200 while healthy() is true, else 503), 404 for anything else."""
    from prometheus_client import make_wsgi_app
    metrics = make_wsgi_app(registry)

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics(environ, start_response)
        if path == "/healthz":
            ok = healthy()
            start_response("200 OK" if ok else "503 Service Unavailable",
                           [("Content-Type", "text/plain; charset=utf-8")])
            return [b"ok\n" if ok else b"watch loop stalled\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: try /metrics or /healthz\n"]

    return app


class MetricsEndpoint:
    """/metrics and /healthz on address:port, served by a daemon thread."""

    def __init__(self, address: str, port: int, stats: PluginStats, state, resource: str,
                 healthy: Callable[[], bool]):
        from prometheus_client import CollectorRegistry
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(PluginCollector(stats, state, resource))
        server_class = _Server6 if ":" in address else _Server
        self.httpd = make_server(address, port, make_app(self.registry, healthy),
                                 server_class=server_class, handler_class=_QuietHandler)
        self.thread: Optional[threading.Thread] = None

    @property
    def bound_port(self) -> int:
        return self.httpd.server_address[1]

    def start(self) -> "MetricsEndpoint":
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="metrics", daemon=True)
        self.thread.start()
        log.info("metrics on http://%s:%d/metrics", self.httpd.server_address[0], self.bound_port)
        return self

    def stop(self) -> None:
        if self.thread is not None:
            self.httpd.shutdown()
            self.thread.join(2.0)
        self.httpd.server_close()


class Heartbeat:
    """The watch loop beats each tick; healthy() while the last beat is recent enough."""

    def __init__(self, max_age: float):
        self.max_age = max_age
        self._last = time.monotonic()

    def beat(self) -> None:
        self._last = time.monotonic()

    def healthy(self) -> bool:
        return time.monotonic() - self._last <= self.max_age


def missing_client() -> Optional[ImportError]:
    """The ImportError of prometheus_client, None when it imports."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError as e:
        return e
    return None


def start(args, stats: PluginStats, state, healthy: Callable[[], bool]) -> Optional[MetricsEndpoint]:
    """The endpoint --metrics-port asks for, serving; None without it. OSError: cannot bind."""
    if not args.metrics_port:
        return None
    return MetricsEndpoint(args.metrics_address, args.metrics_port, stats, state,
                           args.resource_name, healthy).start()
