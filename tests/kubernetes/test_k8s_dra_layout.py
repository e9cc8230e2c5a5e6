"""A DRA claim's limits reach the scheduler in the chart's own layout, and win over the pod's
annotation.

What the chart deploys, run as it deploys it: the scheduler and nvshare-dra-plugin as two
processes with the flags the chart renders for them (host paths moved under a temporary root), each
in a pod of its own (NVSHARE_POD_IDENTITY_ROOT stands in for the kernel's cgroups and the kubelet's
pod log directories, peer.py), the GPU pod's process a third. The GPU pod asks 64 GiB by its
annotation; its claim was given 8 GiB: the claim's amount is what the pod gets.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xpushare.kubernetes.pod_settings import MEMORY_LIMIT
from xpushare.wire.protocol import Limits, MessageType, Settings, encode

from .dra_fakes import GIB, GPU_A, NODE, FakeDraKubelet, FakeResourceApi, claim, result
from .fake_apiserver import kubeconfig_for
from .test_k8s_helm import daemonset, render

from sched_harness import FakeClient, SchedulerProcess  # noqa: E402

pytestmark = pytest.mark.timeout(90)
GPU_POD = ("ml", "trainer", "6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9")
SCHEDULER_POD = ("xpushare-system", "xpushare-scheduler-7xk2p", "11111111-2222-4333-8444-555555555555")
PLUGIN_POD = ("xpushare-system", "xpushare-dra-plugin-q8d4m", "99999999-8888-4777-8666-555555555555")


def place(root: Path, pid: int, pod) -> None:
    """What the kernel and the kubelet show of `pid` running in `pod` (namespace, name, uid)."""
    namespace, name, uid = pod
    proc = root / "proc" / str(pid)
    proc.mkdir(parents=True, exist_ok=True)
    (proc / "cgroup").write_text(
        "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
        f"{uid.replace('-', '_')}.slice/cri-containerd-{'cd' * 32}.scope\n")
    (root / "var" / "log" / "pods" / f"{namespace}_{name}_{uid}").mkdir(parents=True, exist_ok=True)


def container(ds: dict) -> dict:
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    return c


def flag(args, name, default=None):
    values = [a.split("=", 1)[1] for a in args if a.startswith(name + "=")]
    return values[-1] if values else default


def host_paths(ds: dict) -> set:
    return {v["hostPath"]["path"].rstrip("/") for v in ds["spec"]["template"]["spec"]["volumes"]
            if "hostPath" in v}


def test_a_claim_reaches_the_scheduler_from_the_plugins_own_pod_and_wins_over_the_annotation(
        helm, api, short_dir):
    objs = render(helm, "--kube-version", "1.34.0", "--set", "dra.enabled=true",
                  "--set", "scheduler.gpuAnnotations.enabled=true")
    sched_ds, plugin_ds = daemonset(objs, "scheduler"), daemonset(objs, "dra-plugin")
    sched_args, plugin_args = container(sched_ds)["args"], container(plugin_ds)["args"]
    # The socket the plugin dials is the scheduler's, in a directory both pods mount and that a
    # GPU pod's CDI spec never mounts (the plugin's --host-socket-dir).
    plugin_socket = flag(plugin_args, "--scheduler-socket",
                         os.path.join(flag(plugin_args, "--host-socket-dir"), "scheduler.sock"))
    socket_dir = os.path.dirname(plugin_socket)
    assert socket_dir in host_paths(plugin_ds) and socket_dir in host_paths(sched_ds)
    assert plugin_socket in (flag(sched_args, "--socket"), flag(sched_args, "--claims-socket"))
    gpu_pods_get = flag(plugin_args, "--host-socket-dir").rstrip("/")
    assert not (socket_dir + "/").startswith(gpu_pods_get + "/"), \
        f"GPU pods mount {gpu_pods_get}, where the plugin's socket {plugin_socket} is"

    host = Path(short_dir) / "h"
    identity = Path(short_dir) / "id"

    def moved(args):
        return [a.split("=", 1)[0] + "=" + str(host) + a.split("=", 1)[1]
                if "=/" in a else a for a in args]

    def on_host(path):
        return host / path.lstrip("/")

    # The GPU pod (this process) asks 64 GiB by its annotation; the scheduler watches its pods.
    api.add_pod(GPU_POD[1], namespace=GPU_POD[0], node=NODE, uid=GPU_POD[2],
                annotations={MEMORY_LIMIT: "64GiB"})
    place(identity, os.getpid(), GPU_POD)
    kubeconfig = Path(short_dir) / "pods.kubeconfig"
    kubeconfig.write_text(kubeconfig_for(api.url))
    env = dict(os.environ, NODE_NAME=NODE, NVSHARE_POD_IDENTITY_ROOT=str(identity),
               NVSHARE_KUBECONFIG=str(kubeconfig),
               **{e["name"]: e["value"] for e in container(sched_ds)["env"] if "value" in e})
    sched_sock = on_host(flag(sched_args, "--socket"))
    sched_sock.parent.mkdir(parents=True)
    scheduler = SchedulerProcess(sched_sock, [*moved(a for a in sched_args if not a.startswith("--socket=")),
                                              "--no-nvml"], env=env)
    claims_api = FakeResourceApi()
    plugin = None
    try:
        scheduler.start()
        place(identity, scheduler.proc.pid, SCHEDULER_POD)
        assert api.wait(lambda: api.open_watches == 1, timeout=10), scheduler.log()

        on_host("/var/lib/kubelet/plugins_registry").mkdir(parents=True)
        plugin_log = open(Path(short_dir) / "plugin.log", "wb")
        plugin = subprocess.Popen(
            [sys.executable, "-m", "xpushare.kubernetes.dra.main", *moved(plugin_args),
             "--gpu-uuids", GPU_A, "--gpu-memory", "80GiB", "--nvml-health=off", "--watch-interval=0.05",
             "--kubeconfig", claims_api.kubeconfig(short_dir)],
            env=dict(os.environ, NODE_NAME=NODE), stdout=plugin_log, stderr=subprocess.STDOUT)
        place(identity, plugin.pid, PLUGIN_POD)   # before it can connect: it does on a prepare

        c = claim(results=[result(memory="8Gi", compute="30")], pods=(GPU_POD[2],))
        claims_api.add_claim(c)
        kubelet = FakeDraKubelet(str(on_host("/var/lib/kubelet/plugins_registry")))
        try:
            kubelet.register()
            assert kubelet.prepare(c).claims[c["metadata"]["uid"]].error == ""
        finally:
            kubelet.close()

        # prepare tells the scheduler before it answers: the claim is there when the pod starts
        gpu = FakeClient(scheduler.sock, timeout=10)
        gpu.hello()
        gpu.send_raw(encode(Settings(compute_limit=0, compute_share=0, memory_limit=0)))
        assert gpu.expect(MessageType.LIMITS) == Limits(compute_limit=300, memory_limit=8 * GIB), \
            scheduler.log() + (Path(short_dir) / "plugin.log").read_text()
        (me,) = gpu.ctl("status")["clients"]
        assert me["quota"]["sources"]["memory_limit"] == "claim"
        gpu.close()
    finally:
        if plugin is not None:
            plugin.terminate()
            # what is checked here is the claim's limits, not how fast the plugin stops: on a
            # loaded two-core machine its two gRPC servers' graceful stops may take seconds
            plugin.wait(30)
        claims_api.stop()
        scheduler.stop()
