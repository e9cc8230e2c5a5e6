"""The scheduler's Prometheus exporter (--metrics-port, docs/metrics.md) against a live scheduler and
raw protocol clients: series appear when a client attaches, move with its grants, drops and memory
reports, and go when it leaves; /healthz; bad HTTP requests; OpenMetrics; no prometheus_client.

Every scrape follows a round trip that orders it after what it checks: a client's status request
(the scheduler handles a connection's messages in order) or a frame the client waited for.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sched_harness import SRC, MessageType, child_env, registered, uuid
from testkit.waiting import poll

GiB = 1 << 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port: int, path: str = "/metrics", accept: str | None = None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def scrape(port: int) -> dict[str, list[tuple[dict, float]]]:
    """Sample name -> [(labels, value)] of one scrape."""
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(get(port)[2]):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(samples, metric: str, **labels) -> float | None:
    """The one sample of `metric` whose labels include `labels`; None if there is none."""
    found = [v for lab, v in samples.get(metric, []) if labels.items() <= lab.items()]
    assert len(found) <= 1, f"{metric} {labels}: {found}"
    return found[0] if found else None


@pytest.fixture
def metrics_scheduler(start_scheduler):
    port = free_port()
    sched = start_scheduler("--no-nvml", "--mode", "serial", "--tq", "0.05",
                            "--metrics-port", port, "--metrics-address", "127.0.0.1",
                            "--metrics-max-age", "0")
    return sched, port


def test_series_follow_a_client_from_attach_to_disconnect(metrics_scheduler):
    sched, port = metrics_scheduler
    before = scrape(port)
    assert value(before, "xpushare_build_info") == 1
    assert "xpushare_client_priority" not in before and "xpushare_gpu_info" not in before
    a = registered(sched.socket, priority=3)
    a.ctl("status")  # a's HELLO and ATTACH are handled
    s = scrape(port)
    gpu = {"gpu": "", "uuid": uuid(0)}
    me = {**gpu, "client": str(a.client_id), "pid": str(os.getpid()), "namespace": "", "pod": ""}
    assert value(s, "xpushare_gpu_info", **gpu, name="Mock GPU") == 1
    assert value(s, "xpushare_gpu_mode_info", **gpu, mode="serial") == 1
    assert value(s, "xpushare_gpu_time_quantum_seconds", **gpu) == 0.05
    assert value(s, "xpushare_gpu_clients", **gpu) == 1
    assert value(s, "xpushare_gpu_lock_holders", **gpu) == 0
    assert value(s, "xpushare_client_priority", **me) == 3
    assert value(s, "xpushare_client_memory_bytes", **me, kind="managed") == 0
    assert value(s, "xpushare_client_lock_grants_total", **me) == 0
    assert value(s, "xpushare_scheduler_messages_total", type="hello") >= 1
    for kind in ("busy_update", "settings", "job", "residency"):  # a series before the first one
        assert value(s, "xpushare_scheduler_messages_total", type=kind) == 0, kind
    assert value(s, "xpushare_scheduler_connections") >= 1

    a.mem_update(managed=3 * GiB, other=5 << 20)
    a.ctl("status")
    s = scrape(port)
    assert value(s, "xpushare_client_memory_bytes", **me, kind="managed") == 3 * GiB
    assert value(s, "xpushare_client_memory_bytes", **me, kind="device") == 5 << 20

    a.request()
    a.expect(MessageType.LOCK_OK)
    s = scrape(port)
    assert value(s, "xpushare_client_lock_grants_total", **me) == 1
    assert value(s, "xpushare_gpu_lock_holders", **gpu) == 1
    assert value(s, "xpushare_lock_wait_seconds_count", **gpu) == 1
    held = value(s, "xpushare_client_lock_held_seconds_total", **me)
    assert held >= 0
    assert value(scrape(port), "xpushare_client_lock_held_seconds_total", **me) >= held

    a.close()
    poll(lambda: not sched.ctl("status")["clients"], 10, 0.02, what="the client to be forgotten")
    s = scrape(port)
    for name in ("xpushare_client_priority", "xpushare_client_memory_bytes",
                 "xpushare_client_lock_grants_total"):
        assert value(s, name, client=str(a.client_id)) is None, name
    assert value(s, "xpushare_gpu_clients", **gpu) is None  # a client-made GPU goes with it


def test_a_switch_moves_drops_switches_waits_and_phases(metrics_scheduler):
    sched, port = metrics_scheduler
    a, b = registered(sched.socket), registered(sched.socket)
    gpu = {"gpu": "", "uuid": uuid(0)}
    a.request()
    a.expect(MessageType.LOCK_OK)
    b.request()
    b.ctl("status")
    s = scrape(port)
    assert value(s, "xpushare_gpu_lock_waiters", **gpu) == 1
    waited = value(s, "xpushare_client_lock_wait_seconds_total", client=str(b.client_id))
    drop = a.expect(MessageType.DROP_LOCK)  # the 50 ms quantum is up and b waits
    a.release(drain_us=3000)
    b.expect(MessageType.LOCK_OK)
    s = scrape(port)
    mine = {"client": str(a.client_id)}
    assert value(s, "xpushare_client_lock_drops_total", **mine, reason="quantum") == 1
    assert value(s, "xpushare_client_lock_drops_total", **mine, reason="admin") == 0
    assert drop.reason == 1
    assert value(s, "xpushare_gpu_switches_total", **gpu) == 1
    assert value(s, "xpushare_gpu_switch_seconds_count", **gpu, phase="drain") == 1
    assert value(s, "xpushare_gpu_switch_seconds_sum", **gpu, phase="drain") == pytest.approx(0.003)
    assert value(s, "xpushare_gpu_switch_seconds_bucket", **gpu, phase="drain", le="0.005") == 1
    assert value(s, "xpushare_gpu_switch_seconds_bucket", **gpu, phase="drain", le="0.001") == 0
    assert value(s, "xpushare_gpu_switch_seconds_count", **gpu, phase="evict") == 0
    assert value(s, "xpushare_client_lock_held_seconds_total", **mine) >= 0.05
    theirs = {"client": str(b.client_id)}
    assert value(s, "xpushare_client_lock_grants_total", **theirs) == 1
    assert value(s, "xpushare_client_lock_wait_seconds_total", **theirs) >= waited > 0
    assert value(s, "xpushare_lock_wait_seconds_count", **gpu) == 2
    assert value(s, "xpushare_scheduler_messages_total", type="lock_released") == 1
    a.close()
    b.close()


def test_nvml_gpus_have_their_index_and_nvml_series(start_scheduler):
    port = free_port()
    sched = start_scheduler("--metrics-port", port, "--metrics-max-age", "0", nvml=[
        {"uuid": uuid(0), "name": "Fake H100", "memory": 80 * GiB}])
    s = scrape(port)
    gpu = {"gpu": "0", "uuid": uuid(0)}
    assert value(s, "xpushare_gpu_info", **gpu, name="Fake H100") == 1
    assert value(s, "xpushare_gpu_capacity_bytes", **gpu) == 80 * GiB
    assert value(s, "xpushare_gpu_memory_used_bytes", **gpu) == 0  # what the fake NVML says
    assert value(s, "xpushare_gpu_utilization_ratio", **gpu) is None  # the fake has none
    assert value(s, "xpushare_gpu_clients", **gpu) == 0
    with registered(sched.socket) as a:
        a.ctl("status")
        assert value(scrape(port), "xpushare_gpu_clients", **gpu) == 1


def test_without_nvml_there_are_no_nvml_series(metrics_scheduler):
    sched, port = metrics_scheduler
    with registered(sched.socket) as a:
        a.ctl("status")
        s = scrape(port)
    assert value(s, "xpushare_gpu_capacity_bytes", uuid=uuid(0)) == 0
    assert "xpushare_gpu_memory_used_bytes" not in s


def test_healthz_errors_and_malformed_frames(start_scheduler):
    port = free_port()
    sched = start_scheduler("--no-nvml", "--metrics-max-age", "0",
                            env={"NVSHARE_METRICS_PORT": str(port)})  # the chart's way
    assert get(port, "/healthz") == (200, "text/plain; charset=utf-8", "ok\n")
    waiting = socket.create_connection(("127.0.0.1", port), timeout=10)
    waiting.sendall(b"GET /metr")  # another scrape, half sent, while a bad one is answered
    for request, status in ((b"BLAH\r\n\r\n", 400), (b"GET /x HTTP/1.1\r\n\r\n", 404),
                            (b"POST /metrics HTTP/1.1\r\n\r\n", 405),
                            (b"GET /metrics HTTP/1.1\r\nBad header\r\n\r\n", 400),
                            (b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 9000, 431)):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as bad:
            bad.sendall(request)
            answer = _read_all(bad)
            assert answer.startswith(f"HTTP/1.1 {status} ".encode()), (request, answer)
    waiting.sendall(b"ics HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = _read_all(waiting)
    waiting.close()
    assert answer.startswith(b"HTTP/1.1 200 ") and b"xpushare_build_info" in answer
    with socket.socket(socket.AF_UNIX) as raw:  # a scheduler frame that is not one
        raw.connect(str(sched.socket))
        raw.sendall(b"\xff" * 64)
        raw.settimeout(10)
        while raw.recv(4096):
            pass
    assert value(scrape(port), "xpushare_scheduler_malformed_frames_total") == 1
    assert sched.alive()


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_openmetrics_when_asked(metrics_scheduler):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
    sched, port = metrics_scheduler
    with registered(sched.socket) as a:
        a.ctl("status")
        status, ctype, body = get(port, accept="application/openmetrics-text; version=1.0.0")
    assert status == 200 and ctype.startswith("application/openmetrics-text")
    assert body.endswith("# EOF\n") and body.count("# EOF") == 1
    names = {f.name for f in om_parse(body)}  # the strict parser: the exposition is valid
    assert {"xpushare_gpu", "xpushare_client_lock_grants", "xpushare_lock_wait_seconds"} <= names
    assert get(port)[1].startswith("text/plain")


def test_without_prometheus_client_the_port_is_a_usage_error(tmp_path, sockdir):
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nsys.modules['prometheus_client'] = None\n")
    env = child_env({"PYTHONPATH": os.pathsep.join([str(tmp_path), str(SRC)])})
    r = subprocess.run([sys.executable, "-m", "xpushare.scheduler", "--no-nvml", "--socket",
                        str(sockdir / "s.sock"), "--metrics-port", "1"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "pip install 'xpushare[kubernetes]'" in r.stderr
    assert not (sockdir / "s.sock").exists()
    r = subprocess.run([sys.executable, "-m", "xpushare.scheduler", "--help"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--metrics-port" in r.stdout  # only the port needs it


def test_a_port_in_use_is_an_error(sockdir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "xpushare.scheduler", "--no-nvml", "--socket",
                            str(sockdir / "s.sock"), "--metrics-address", "127.0.0.1",
                            "--metrics-port", str(port)], env=child_env(),
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and f"cannot serve metrics on 127.0.0.1:{port}" in r.stderr
    assert not (sockdir / "s.sock").exists()
