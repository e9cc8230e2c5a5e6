"""The Grafana dashboard (deploy/grafana/xpushare.json) against a real scrape: every series its
queries and variables name, and every label they group, join, match or print by, is served by a live
scheduler with clients attached, one holding the lock and one waiting, after a switch.

NVML is the tests' fake pynvml with a utilization reading added (the fake has none), so the NVML
series (memory used, utilization) are in the scrape too."""

from __future__ import annotations

import json
import os
import re

import pytest

from sched_harness import FAKE_NVML, ROOT, SRC, MessageType, SchedulerProcess, registered, uuid
from test_metrics import GiB, free_port, scrape, value

DASHBOARD = ROOT / "deploy" / "grafana" / "xpushare.json"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# labels Prometheus adds to every series of a target (legends may print them)
TARGET_LABELS = {"instance", "job"}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(d: dict) -> list[dict]:
    out = []
    for p in d["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # collapsed rows keep theirs inside
    return out


def targets(d: dict) -> list[tuple[str, dict]]:
    return [(p["title"], t) for p in panels(d) for t in p.get("targets", [])]


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bxpushare_[a-z_]+", expr))


def family(name: str) -> str:
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def grouping_labels(expr: str) -> set[str]:
    """Labels in by (...), without (...), on (...), ignoring (...), group_left/right (...)."""
    found = set()
    for m in re.finditer(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        found |= {x.strip() for x in m.group(1).split(",") if x.strip()}
    return found


def matcher_labels(expr: str) -> set[str]:
    found = set()
    for m in re.finditer(r"\{([^}]*)\}", expr):
        found |= set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*\"", m.group(1)))
    return found


def legend_labels(legend: str) -> set[str]:
    return set(re.findall(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}", legend))


def test_the_helpers_find_what_a_query_uses():
    expr = ('sum by (gpu, uuid, le) (rate(xpushare_lock_wait_seconds_bucket{gpu=~"$gpu"}[5m]))\n'
            ' / on (gpu, uuid) group_left sum by(pod) (xpushare_client_memory_bytes{kind!="device"})')
    assert metric_names(expr) == {"xpushare_lock_wait_seconds_bucket", "xpushare_client_memory_bytes"}
    assert family("xpushare_lock_wait_seconds_bucket") == "xpushare_lock_wait_seconds"
    assert grouping_labels(expr) == {"gpu", "uuid", "le", "pod"}
    assert matcher_labels(expr) == {"gpu", "kind"}
    assert legend_labels("{{namespace}}/{{ pod }} GPU {{gpu}}") == {"namespace", "pod", "gpu"}


def test_the_dashboard_is_a_grafana_dashboard_with_its_variables():
    d = dashboard()
    assert 36 <= d["schemaVersion"] <= 41 and d["uid"] and d["title"]
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("gpu", "namespace"):
        v = variables[name]
        assert v["type"] == "query" and v["datasource"]["uid"] == "${datasource}"
        assert re.fullmatch(r"label_values\(xpushare_[a-z_]+, ?%s\)" % name, v["query"]["query"])
    ids = [p["id"] for p in panels(d)]
    assert len(ids) == len(set(ids))
    for title, t in targets(d):
        assert t["expr"].strip() and metric_names(t["expr"]), title
        assert t["datasource"]["uid"] == "${datasource}", title
    for p in panels(d):
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}" and p.get("description"), p["title"]
            assert p["targets"], p["title"]
    titles = {p["title"] for p in panels(d)}
    assert {"GPU memory", "GPU utilisation", "Memory per pod", "Lock-held share per pod",
            "GPU time per pod",
            "Lock wait p50 / p99", "Switches per minute", "Switch cost by phase", "Mode",
            "Holders, waiters and clients", "Scheduler connections", "Malformed frames"} <= titles
    (busy,) = [p for p in panels(d) if p["title"] == "GPU time per pod"]
    assert "xpushare_client_gpu_busy_seconds_total" in busy["targets"][0]["expr"]


@pytest.fixture
def live_scrape(sockdir, tmp_path):
    """One scrape of a scheduler with an NVML GPU and two clients: a switched from a to b, then
    a asked again, so b holds (draining after its quantum) and a waits."""
    fake = tmp_path / "nvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text(
        f"exec(open({str(FAKE_NVML / 'pynvml.py')!r}).read())\n\n"
        "def nvmlDeviceGetUtilizationRates(h):\n"
        "    return SimpleNamespace(gpu=37, memory=5)\n")
    port = free_port()
    sched = SchedulerProcess(sockdir / "s.sock", ("--mode", "serial", "--tq", "0.05",
                                                   "--metrics-port", port, "--metrics-address", "127.0.0.1",
                                                   "--metrics-max-age", "0"),
                             env={"FAKE_NVML_GPUS": json.dumps([{"uuid": uuid(0), "name": "Fake H100",
                                                                 "memory": 80 * GiB}]),
                                  "PYTHONPATH": os.pathsep.join([str(fake), str(FAKE_NVML), str(SRC)])})
    sched.start()
    a, b = registered(sched.socket), registered(sched.socket)
    try:
        a.mem_update(managed=3 * GiB, other=1 << 20)
        b.mem_update(managed=2 * GiB, other=1 << 20)
        a.request()
        a.expect(MessageType.LOCK_OK)
        b.request()
        a.expect(MessageType.DROP_LOCK)  # the quantum is up and b waits
        a.release(drain_us=2000)
        b.expect(MessageType.LOCK_OK)
        a.request()
        assert a.ctl("set_compute_limit", value=40, client_id=a.client_id)["ok"]
        a.ctl("status")
        b.ctl("status")
        s = scrape(port)
        gpu = {"gpu": "0", "uuid": uuid(0)}
        assert value(s, "xpushare_gpu_lock_holders", **gpu) == 1
        assert value(s, "xpushare_gpu_lock_waiters", **gpu) == 1
        assert value(s, "xpushare_gpu_switches_total", **gpu) == 1
        assert value(s, "xpushare_gpu_utilization_ratio", **gpu) == pytest.approx(0.37)
        yield s
    finally:
        a.close()
        b.close()
        sched.stop()


def problems(d: dict, s: dict) -> tuple[list[str], set[str]]:
    """What in dashboard d the scrape s does not serve, and the sample names d's queries use."""
    families = {family(name) for name in s}
    labels = {name: set.intersection(*(set(lab) for lab, _ in samples))  # on every sample
              for name, samples in s.items()}
    found, used = [], set()
    for title, t in targets(d):
        expr = t["expr"]
        names = metric_names(expr)
        used |= names
        for name in names:
            if family(name) not in families or name not in s:
                found.append(f"{title}: {name} is not scraped")
        for label in grouping_labels(expr) | matcher_labels(expr):
            for name in names & labels.keys():  # (one not scraped is reported above)
                if label not in labels[name]:
                    found.append(f"{title}: {name} has no label {label!r}")
        for label in legend_labels(t.get("legendFormat", "")) - TARGET_LABELS:
            if not any(label in labels.get(name, ()) for name in names):
                found.append(f"{title}: legend label {label!r}")
    for v in d["templating"]["list"]:
        if v["type"] == "query":
            metric, label = re.fullmatch(r"label_values\((\w+), ?(\w+)\)", v["query"]["query"]).groups()
            if label not in labels.get(metric, ()):
                found.append(f"variable {v['name']}: {metric} has no label {label!r}")
    return found, used


def test_every_series_and_label_the_dashboard_uses_is_scraped(live_scrape):
    found, used = problems(dashboard(), live_scrape)
    assert not found
    # what the panels are for
    assert {"xpushare_gpu_capacity_bytes", "xpushare_gpu_memory_used_bytes", "xpushare_gpu_utilization_ratio",
            "xpushare_client_memory_bytes", "xpushare_client_lock_held_seconds_total",
            "xpushare_client_gpu_busy_seconds_total", "xpushare_client_compute_limit_ratio",
            "xpushare_lock_wait_seconds_bucket", "xpushare_gpu_switches_total",
            "xpushare_gpu_switch_seconds_sum", "xpushare_gpu_switch_seconds_count",
            "xpushare_gpu_mode_info", "xpushare_gpu_lock_holders", "xpushare_gpu_lock_waiters",
            "xpushare_gpu_clients", "xpushare_scheduler_connections",
            "xpushare_scheduler_malformed_frames_total"} <= used


def test_a_series_or_label_the_scrape_lacks_is_caught(live_scrape):
    """The check has teeth: a misspelt series, a label the series does not carry, a legend label."""
    for bad_expr, legend in (('xpushare_gpu_busy_seconds_total{gpu=~"$gpu"}', ""),
                             ('sum by (pod) (xpushare_gpu_clients)', ""),
                             ('xpushare_gpu_clients{node="a"}', ""),
                             ('xpushare_lock_wait_seconds_count', "{{le}}"),
                             ('xpushare_gpu_clients', "{{mode}}")):
        d = dashboard()
        d["panels"][1]["targets"][0].update(expr=bad_expr, legendFormat=legend)
        found, _ = problems(d, live_scrape)
        assert len(found) == 1, (bad_expr, found)
