"""nvshare-device-plugin --metrics-port: the real plugin process, driven by the fake kubelet, scraped
over HTTP and parsed with prometheus_client's parsers."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from testkit.waiting import poll
from xpushare import __version__
from xpushare.kubernetes.plugin import build_parser
from xpushare.kubernetes.plugin_metrics import PluginStats
from xpushare.kubernetes.proto import deviceplugin_pb2 as pb

from .k8s_helpers import GPU_A, GPU_B
from .test_k8s_plugin_extra import HINT, entry

pytestmark = pytest.mark.timeout(90)

ENDPOINT = "nvshare-gpu.sock"
RES = {"resource": "nvshare.com/gpu"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port: int, path: str, accept: str = "") -> tuple[int, str, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def scrape(port: int) -> dict:
    """{(sample name, frozenset of labels): value}"""
    status, ctype, body = get(port, "/metrics")
    assert status == 200 and ctype.startswith("text/plain"), (status, ctype)
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(body) for s in fam.samples}


def value(samples: dict, name: str, **labels) -> float:
    return samples[(name, frozenset(labels.items()))]


def scrape_until(port: int, what: str, **expected) -> dict:
    """Scrape until every unlabelled series named in expected (xpushare_plugin_ left out) has
    that value; the plugin counts an event just after the fake kubelet sees it."""
    def ready():
        s = scrape(port)
        return s if all(value(s, "xpushare_plugin_" + k) == v for k, v in expected.items()) else None
    return poll(ready, timeout=20, interval=0.1, what=what)


@pytest.fixture
def metered(kubelet, start_plugin):
    """The plugin with GPU_A (NUMA 1) and GPU_B, 4 units each, metrics on a free port, registered."""
    port = free_port()
    plugin = start_plugin("--gpu-uuids", f"{GPU_A}:numa=1,{GPU_B}", "--virtual-devices", "4",
                          "--metrics-port", str(port), "--metrics-address", "127.0.0.1")
    try:
        kubelet.wait_registration(timeout=30)
    except Exception:
        pytest.fail("plugin did not register; its log:\n" + plugin.output())
    kubelet.wait_update()
    return plugin, kubelet, port


def test_series_present(metered):
    plugin, kubelet, port = metered
    s = scrape_until(port, "the registration and the kubelet's stream counted",
                     registrations_total=1, list_and_watch_streams=1)
    assert value(s, "xpushare_plugin_build_info", version=__version__) == 1
    assert value(s, "xpushare_plugin_devices", **RES) == 8
    assert value(s, "xpushare_plugin_devices_healthy", **RES) == 8
    assert value(s, "xpushare_plugin_gpus") == 2
    assert value(s, "xpushare_plugin_gpu_info", uuid=GPU_A, index="0", numa_node="1") == 1
    assert value(s, "xpushare_plugin_gpu_info", uuid=GPU_B, index="1", numa_node="") == 1
    assert value(s, "xpushare_plugin_gpu_healthy", uuid=GPU_A) == 1
    assert value(s, "xpushare_plugin_registration_failures_total") == 0
    assert value(s, "xpushare_plugin_allocations_total", **RES) == 0
    assert value(s, "xpushare_plugin_allocations_refused_total", **RES) == 0
    assert value(s, "xpushare_plugin_allocated_devices_total") == 0
    assert all(name.startswith("xpushare_plugin_") for name, _ in s)


def test_health_is_counted(metered):
    plugin, _, port = metered
    plugin.set_health({GPU_A: "Unhealthy"})
    s = poll(lambda: (lambda m: m if value(m, "xpushare_plugin_gpu_healthy", uuid=GPU_A) == 0 else None)(
        scrape(port)), timeout=20, interval=0.1, what="GPU_A unhealthy in the metrics")
    assert value(s, "xpushare_plugin_devices_healthy", **RES) == 4
    assert value(s, "xpushare_plugin_devices", **RES) == 8  # unhealthy devices stay advertised
    assert value(s, "xpushare_plugin_gpu_healthy", uuid=GPU_B) == 1


def test_allocate_moves_the_counters(metered):
    _, kubelet, port = metered
    stub = kubelet.stub(ENDPOINT)
    stub.Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=[f"{GPU_A}::0", f"{GPU_B}::1"]),
        pb.ContainerAllocateRequest(devices_ids=[f"{GPU_A}::3"])]), timeout=10)
    stub.Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=[f"{GPU_B}::2"])]), timeout=10)
    with pytest.raises(Exception):
        stub.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[f"{GPU_A}::0", f"{GPU_A}::1"])]), timeout=10)
    s = scrape(port)
    assert value(s, "xpushare_plugin_allocations_total", **RES) == 2
    assert value(s, "xpushare_plugin_allocated_devices_total") == 4
    assert value(s, "xpushare_plugin_allocations_refused_total", **RES) == 1


def test_kubelet_restart_counts_a_registration(metered):
    plugin, kubelet, port = metered
    kubelet.restart()
    kubelet.wait_registration(timeout=30)
    kubelet.wait_update()
    scrape_until(port, "a second registration, one open stream", registrations_total=2,
                 list_and_watch_streams=1)
    assert plugin.proc.poll() is None


def test_rejected_registration_is_counted(kubelet, start_plugin):
    kubelet.reject = 1
    port = free_port()
    start_plugin("--gpu-uuids", GPU_A, "--virtual-devices", "1", "--metrics-port", str(port))
    kubelet.wait_registration(timeout=30)
    scrape_until(port, "one failure, then one registration", registration_failures_total=1,
                 registrations_total=1)


def test_openmetrics_healthz_and_404(metered):
    _, _, port = metered
    status, ctype, body = get(port, "/metrics", accept="application/openmetrics-text; version=1.0.0")
    assert status == 200 and ctype.startswith("application/openmetrics-text")
    assert body.endswith("# EOF\n")
    names = {fam.name for fam in parse_openmetrics(body)}
    assert {"xpushare_plugin_allocations", "xpushare_plugin_build", "xpushare_plugin_devices"} <= names
    assert get(port, "/healthz") == (200, "text/plain; charset=utf-8", "ok\n")
    assert get(port, "/nothing")[0] == 404


def test_env_sets_the_port_and_zero_is_off(monkeypatch):
    monkeypatch.setenv("NVSHARE_PLUGIN_METRICS_PORT", "9555")
    args = build_parser().parse_args([])
    assert (args.metrics_port, args.metrics_address) == (9555, "0.0.0.0")
    monkeypatch.delenv("NVSHARE_PLUGIN_METRICS_PORT")
    assert build_parser().parse_args([]).metrics_port == 0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--metrics-port", "70000"])


def test_port_in_use_exits_with_message(start_plugin):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        plugin = start_plugin("--gpu-uuids", GPU_A, "--metrics-port", str(port),
                              "--metrics-address", "127.0.0.1")
        assert plugin.proc.wait(timeout=30) == 1
    assert f"cannot serve metrics on 127.0.0.1:{port}" in plugin.output()


def test_missing_prometheus_client_names_the_extra():
    r = entry("prometheus_client", "--gpu-uuids", GPU_A, "--metrics-port", "9555")
    assert r.returncode == 1, r.stderr
    assert HINT in r.stderr and "--metrics-port needs the kubernetes extra" in r.stderr
    assert "Traceback" not in r.stderr


def test_stats_are_consistent_under_threads():
    import threading
    stats = PluginStats()

    def work():
        for _ in range(2000):
            stats.allocated(3)
            stats.stream_opened()
            stats.stream_closed()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    snap = stats.snapshot()
    assert snap["allocations"] == 16000 and snap["allocated_devices"] == 48000 and snap["streams"] == 0


def test_docs_list_every_series(metered):
    from .k8s_helpers import REPO
    _, _, port = metered
    doc = (REPO / "docs" / "metrics.md").read_text().split("## Device plugin", 1)[1]
    names = {fam.name for fam in text_string_to_metric_families(get(port, "/metrics")[2])}
    names = {n + "_total" if f"`{n}_total`" in doc else n for n in names}  # counters' family names
    names = {n + "_info" if f"`{n}_info`" in doc else n for n in names}     # and info families'
    missing = sorted(n for n in names if f"`{n}`" not in doc)
    assert not missing, f"docs/metrics.md's Device plugin section does not list {missing}"
    assert len(names) == 12


def test_healthz_fails_when_the_watch_loop_stalls():
    from prometheus_client import CollectorRegistry

    from xpushare.kubernetes.plugin_metrics import Heartbeat, make_app
    beat = Heartbeat(max_age=0.05)
    assert beat.healthy()
    statuses = []
    app = make_app(CollectorRegistry(), beat.healthy)
    environ = {"PATH_INFO": "/healthz", "REQUEST_METHOD": "GET"}
    poll(lambda: not beat.healthy(), timeout=5, interval=0.01, what="the heartbeat to go stale")
    assert app(environ, lambda status, headers: statuses.append(status)) == [b"watch loop stalled\n"]
    beat.beat()
    assert app(environ, lambda status, headers: statuses.append(status)) == [b"ok\n"]
    assert statuses == ["503 Service Unavailable", "200 OK"]
