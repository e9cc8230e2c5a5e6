"""The chart's Grafana dashboard ConfigMap (metrics.grafanaDashboard), rendered with real helm as
test_k8s_helm.py does; the dashboard's queries are checked against a live scrape in
tests/scheduler/test_dashboard.py."""

from __future__ import annotations

import json
import subprocess

import pytest

from .k8s_helpers import REPO
from .test_k8s_helm import CHART, NS, by_kind, kv, render, validate_all  # noqa: F401 (fixtures)

DASHBOARD = REPO / "deploy" / "grafana" / "xpushare.json"
CHART_DASHBOARD = CHART / "dashboards" / "xpushare.json"

pytestmark = pytest.mark.timeout(240)


def test_the_chart_ships_the_same_dashboard_as_deploy_grafana():
    """deploy/grafana/xpushare.json is a copy of the chart's file (.Files.Get reads only files inside
    the chart): the two must not drift apart."""
    assert not DASHBOARD.is_symlink() and not CHART_DASHBOARD.is_symlink()
    assert DASHBOARD.read_bytes() == CHART_DASHBOARD.read_bytes()
    json.loads(DASHBOARD.read_text())


def test_no_dashboard_by_default(helm):
    for extra in ([], ["--set", "metrics.enabled=true"]):
        assert not by_kind(render(helm, *extra), "ConfigMap")


def test_dashboard_configmap(helm, kv):
    objs = render(helm, "--set", "metrics.enabled=true", "--set", "metrics.grafanaDashboard.enabled=true")
    (cm,) = by_kind(objs, "ConfigMap")
    assert cm["metadata"]["namespace"] == NS
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["labels"]["app.kubernetes.io/part-of"] == "xpushare"
    assert "annotations" not in cm["metadata"]
    assert list(cm["data"]) == ["xpushare.json"]
    assert cm["data"]["xpushare.json"] == DASHBOARD.read_text().rstrip("\n")
    assert json.loads(cm["data"]["xpushare.json"]) == json.loads(DASHBOARD.read_text())
    validate_all(kv, objs)


def test_dashboard_labels_annotations_and_namespace(helm):
    objs = render(helm, "--set", "metrics.grafanaDashboard.enabled=true",
                  "--set", "metrics.grafanaDashboard.labels.grafana_dashboard=null",
                  "--set", "metrics.grafanaDashboard.labels.dashboards=gpu",
                  "--set", "metrics.grafanaDashboard.annotations.grafana_folder=GPUs",
                  "--set", "metrics.grafanaDashboard.namespace=monitoring")
    (cm,) = by_kind(objs, "ConfigMap")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["dashboards"] == "gpu"
    assert "grafana_dashboard" not in cm["metadata"]["labels"]
    assert cm["metadata"]["annotations"] == {"grafana_folder": "GPUs"}
    assert json.loads(cm["data"]["xpushare.json"])["uid"] == "xpushare"


def test_helm_lint_with_the_dashboard(helm):
    r = subprocess.run([helm, "lint", "--strict", str(CHART), "--set", "metrics.enabled=true",
                        "--set", "metrics.grafanaDashboard.enabled=true",
                        "--set", "metrics.grafanaDashboard.namespace=monitoring"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "0 chart(s) failed" in r.stdout, r.stdout + r.stderr
