"""The chart's values schema (helm refuses what the binaries refuse), the device plugin's probes,
and the DRA mode (dra.enabled): its DaemonSet, RBAC and DeviceClass, the example claims and the
plugin's ResourceSlice, validated against the Kubernetes 1.34+ schemas (resource.k8s.io/v1)."""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml

from .k8s_helpers import REPO
from .test_k8s_helm import CHART, IMAGE, NS, by_kind, daemonset, kv, render  # noqa: F401  (kv: a fixture)

pytestmark = pytest.mark.timeout(240)
DRA_SCHEMA_VERSIONS = ["1.34.0", "latest"]   # resource.k8s.io/v1 is GA from 1.34
EXAMPLES = REPO / "deploy" / "examples" / "dra-claims.yaml"


def refused(helm, *sets: str) -> str:
    args = [a for s in sets for a in ("--set", s)]
    r = subprocess.run([helm, "template", "xpushare", str(CHART), "--namespace", NS, *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, f"helm accepted {sets}"
    assert "don't meet the specifications of the schema" in r.stderr, r.stderr
    return r.stderr


def _scheduler_refuses(*argv):
    from xpushare.scheduler.__main__ import build_parser
    with pytest.raises(SystemExit):
        build_parser().parse_args(list(argv))


def _plugin_refuses(*argv):
    from xpushare.kubernetes.plugin_cli import build_parser
    with pytest.raises(SystemExit):
        build_parser().parse_args(list(argv))


def _dra_refuses(*argv):
    from xpushare.kubernetes.dra.cli import build_parser
    with pytest.raises(SystemExit):
        build_parser().parse_args(list(argv))


# value -> the flag the chart renders it into, refused by the binary that takes it
BAD_VALUES = [
    ("scheduler.tq=0", "scheduler.tq", lambda: _scheduler_refuses("--tq=0")),
    ("scheduler.mode=fast", "scheduler.mode", lambda: _scheduler_refuses("--mode=fast")),
    ("scheduler.gpuMemory={lots}", "scheduler.gpuMemory", lambda: _scheduler_refuses("--gpu-memory=lots")),
    ("metrics.port=99999", "metrics.port", lambda: _scheduler_refuses("--metrics-port=99999")),
    ("devicePlugin.metrics.port=70000", "devicePlugin.metrics.port",
     lambda: _plugin_refuses("--metrics-port=70000")),
    ("devicePlugin.virtualDevices=0", "devicePlugin.virtualDevices",
     lambda: _plugin_refuses("--virtual-devices=0")),
    ("devicePlugin.nvmlHealth=maybe", "devicePlugin.nvmlHealth", lambda: _plugin_refuses("--nvml-health=maybe")),
    ("dra.sharing=exclusive", "dra.sharing", lambda: _dra_refuses("--sharing=exclusive")),
    ("dra.slots=0", "dra.slots", lambda: _dra_refuses("--slots=0")),
    ("dra.oversubscribe=0", "dra.oversubscribe", lambda: _dra_refuses("--oversubscribe=0")),
]


@pytest.mark.parametrize("value, name, binary_refuses", BAD_VALUES, ids=[v[0] for v in BAD_VALUES])
def test_the_values_schema_refuses_what_the_binaries_refuse(helm, value, name, binary_refuses):
    binary_refuses()
    assert name in refused(helm, value)


def test_the_schema_refuses_misspelt_keys_and_takes_every_good_value(helm):
    assert "tqq" in refused(helm, "scheduler.tqq=5")
    from xpushare.scheduler.__main__ import build_parser
    for tq in ("auto", "7", "0.5"):
        ds = daemonset(render(helm, "--set", f"scheduler.tq={tq}", "--set", "scheduler.mode=serial",
                              "--set", "scheduler.gpuMemory={GPU-1234=16GiB,8G}"), "scheduler")
        build_parser().parse_args(ds["spec"]["template"]["spec"]["containers"][0]["args"])


def test_the_device_plugin_has_probes_that_dial_its_own_socket(helm):
    from xpushare.kubernetes.plugin_cli import build_parser
    ds = daemonset(render(helm, "--set", "devicePlugin.kubeletRootDir=/var/snap/k8s/kubelet"), "device-plugin")
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    for probe in ("livenessProbe", "readinessProbe"):
        command = c[probe]["exec"]["command"]
        assert command[0] == "nvshare-device-plugin"
        args = build_parser().parse_args(command[1:])
        assert args.probe and args.device_plugin_dir == mounts["device-plugins"] == \
            "/var/snap/k8s/kubelet/device-plugins"
        assert c[probe]["timeoutSeconds"] >= 5 and c[probe]["failureThreshold"] >= 3


def _validate(kv, objs):  # noqa: F811
    latest = kv.utils.latest_version()
    for version in DRA_SCHEMA_VERSIONS:
        version = latest if version == "latest" else version
        for obj in objs:
            try:
                kv.validate(obj, version, strict=True)
            except kv.ValidationError as e:
                pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} invalid for Kubernetes {version}: {e}")


def test_dra_mode_renders_the_dra_plugin_instead_of_the_device_plugin(helm, kv):  # noqa: F811
    objs = render(helm, "--kube-version", "1.34.0", "--set", "dra.enabled=true", "--set", "dra.gpuMemory={40GiB}",
                  "--set", "dra.containerEnv.NVSHARE_DEBUG=1", "--set", "devicePlugin.metrics.enabled=true")
    assert sorted(o["kind"] for o in objs) == ["ClusterRole", "ClusterRole", "ClusterRoleBinding",
                                               "ClusterRoleBinding", "DaemonSet", "DaemonSet", "DeviceClass",
                                               "ServiceAccount", "ServiceAccount"]
    components = {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in by_kind(objs, "DaemonSet")}
    assert components == {"scheduler", "dra-plugin"}
    _validate(kv, objs)
    (dc,) = by_kind(objs, "DeviceClass")
    assert dc["metadata"]["name"] == "gpu.nvshare.com"
    assert dc["spec"]["selectors"] == [{"cel": {"expression": 'device.driver == "gpu.nvshare.com"'}}]


def test_the_dra_plugin_daemonset_and_its_rbac(helm):
    from xpushare.kubernetes.dra.cli import build_parser
    objs = render(helm, "--kube-version", "1.34.0", "--set", "dra.enabled=true", "--set", "dra.sharing=slots",
                  "--set", "dra.slots=8",
                  "--set", "dra.oversubscribe=1.5")
    spec = daemonset(objs, "dra-plugin")["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    args = build_parser().parse_args(c["args"])
    assert (args.sharing, args.slots, args.oversubscribe) == ("slots", 8, 1.5)
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/var/lib/kubelet/plugins/gpu.nvshare.com", "/var/lib/kubelet/plugins_registry", "/var/run/cdi",
            "/var/lib/nvshare/dra", "/var/lib/nvshare/lib", "/var/run/nvshare-dra"} <= mounts
    assert "/var/run/nvshare" not in mounts      # the scheduler's claims socket is all it dials
    assert args.kubelet_registry_dir == "/var/lib/kubelet/plugins_registry"
    assert os.path.join(args.kubelet_plugins_dir, args.driver_name) in mounts
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert spec["automountServiceAccountToken"] is True
    for probe in ("livenessProbe", "readinessProbe"):
        command = c[probe]["exec"]["command"]
        assert command[0] == "nvshare-dra-plugin" and build_parser().parse_args(command[1:]).probe
    (role,) = [r for r in by_kind(objs, "ClusterRole") if r["metadata"]["name"].endswith("dra-plugin")]
    assert role["rules"] == [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
         "verbs": ["create", "update", "delete", "get", "list", "watch"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    (binding,) = [b for b in by_kind(objs, "ClusterRoleBinding") if b["metadata"]["name"].endswith("dra-plugin")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": spec["serviceAccountName"],
                                    "namespace": NS}]


def test_the_example_claims_validate(kv):  # noqa: F811
    objs = [d for d in yaml.safe_load_all(EXAMPLES.read_text()) if d]
    assert {o["metadata"]["name"] for o in by_kind(objs, "ResourceClaimTemplate")} == {
        "notebook-gpu", "training-gpu", "two-gpus"}
    _validate(kv, objs)
    notebook = next(o for o in objs if o["metadata"]["name"] == "notebook-gpu")
    assert notebook["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"] == {
        "memory": "8Gi", "compute": "30"}


@pytest.mark.parametrize("flags", [[], ["--sharing", "slots", "--slots", "3"]])
def test_the_published_resource_slice_validates(kv, capsys, flags):  # noqa: F811
    from xpushare.kubernetes.dra.main import main
    from .dra_fakes import GIB, GPU_A, GPU_B, FakeGpu, FakeNvml
    nvml = FakeNvml(FakeGpu(GPU_A), FakeGpu(GPU_B, memory=40 * GIB))
    assert main(["--dry-run", "--node-name", "gpu-node-1", *flags], nvml=nvml) == 0
    _validate(kv, [yaml.safe_load(capsys.readouterr().out)])


def test_the_dra_plugin_decides_its_sharing_by_default(helm):
    """auto: consumable, but slots where the API server's allocator mis-checks consumable capacity
    (1.34, several GPUs): the plugin knows the server's version, the chart does not."""
    from xpushare.kubernetes.dra.cli import build_parser
    objs = render(helm, "--kube-version", "1.34.0", "--set", "dra.enabled=true")
    (c,) = daemonset(objs, "dra-plugin")["spec"]["template"]["spec"]["containers"]
    assert build_parser().parse_args(c["args"]).sharing == "auto"


@pytest.mark.parametrize("version", ["1.32.0", "1.33.5"])
def test_the_dra_chart_refuses_clusters_older_than_1_34_with_a_clear_message(helm, version):
    r = subprocess.run([helm, "template", "xpushare", str(CHART), "--namespace", NS, "--kube-version", version,
                        "--set", "dra.enabled=true", *IMAGE], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert f"dra.enabled=true needs Kubernetes 1.34 or newer (resource.k8s.io/v1); this cluster is v{version}" \
        in r.stderr, r.stderr
    assert "--kube-version" in r.stderr
    assert render(helm, "--kube-version", version)          # the device plugin renders there
