"""A pod annotation reaches a running client end to end: the fake API server (fake_apiserver.py) ->
the pod watch that the real scheduler process starts (server._start_pod_watch) -> Quotas -> LIMITS on
the client's connection. The unit tests cover each piece alone (test_k8s_pod_settings.py: the
watcher; tests/scheduler/test_quotas.py: precedence); this one fails when the wiring between them
breaks.

The client is this test process. It has no pod cgroup, so the scheduler is started with
NVSHARE_POD_IDENTITY_ROOT (peer.py): a directory standing in for / when the scheduler reads
<root>/proc/<pid>/cgroup and <root>/var/log/pods. The identity still comes from the scheduler's
side: what the client says in HELLO about its pod is a hint and is shown as one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from xpushare.kubernetes.pod_settings import COMPUTE_LIMIT, EVENT_REASON, MEMORY_LIMIT
from xpushare.wire.protocol import FEATURE_QUOTAS, Limits, MessageType, Settings, encode

from .fake_apiserver import kubeconfig_for


from sched_harness import FakeClient, SchedulerProcess  # noqa: E402

GiB = 1 << 30
NODE = "node-a"
POD_UID = "6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
CONTAINER = "ab" * 32
NAMESPACE, NAME = "ml", "trainer"
# Applied within a second, as docs/kubernetes.md says; the waits themselves are longer, so that a
# slow run fails on this bound with the measured time rather than on a timeout.
APPLY_BOUND = 1.0
WAIT = 10.0



@pytest.fixture
def workdir():
    d = Path(tempfile.mkdtemp(prefix="xpa-", dir="/tmp"))  # a Unix socket path has 107 bytes
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def pod_root(root: Path, pid: int) -> Path:
    """What the kernel and the kubelet would show for `pid` in the pod: a systemd-driver cgroup
    path of a Burstable pod's containerd container, and the pod's log directory."""
    proc = root / "proc" / str(pid)
    proc.mkdir(parents=True)
    slice_uid = POD_UID.replace("-", "_")
    (proc / "cgroup").write_text(
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{slice_uid}.slice/cri-containerd-{CONTAINER}.scope\n")
    (root / "var" / "log" / "pods" / f"{NAMESPACE}_{NAME}_{POD_UID}").mkdir(parents=True)
    return root


@pytest.fixture
def start_scheduler(api, workdir):
    """start_scheduler() -> the scheduler with pod annotations on, watching NODE on the fake API
    server, once it has listed the pods and watches for changes; this process is in pod
    NAMESPACE/NAME. The pods the test added before are in the list, whose reports the scheduler
    takes before any connection that comes after the watch opened."""
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(kubeconfig_for(api.url))
    root = pod_root(workdir / "root", os.getpid())
    started = []

    def start() -> SchedulerProcess:
        proc = SchedulerProcess(workdir / "s.sock", ("--no-nvml", "--mode", "serial", "--tq", "30"),
                                env={"NVSHARE_POD_ANNOTATIONS": "on", "NODE_NAME": NODE,
                                     "NVSHARE_KUBECONFIG": str(kubeconfig),
                                     "NVSHARE_POD_IDENTITY_ROOT": str(root)})
        started.append(proc)
        proc.start()
        assert api.wait(lambda: api.open_watches == 1, timeout=WAIT), proc.log()
        return proc

    yield start
    for proc in started:
        proc.stop()


def limits_after(client: FakeClient, change) -> tuple[Limits, float]:
    """change(), then the next frame, which must be LIMITS; with the time it took."""
    started = time.monotonic()
    change()
    limits = client.expect(MessageType.LIMITS, timeout=WAIT)
    return limits, time.monotonic() - started


def test_annotations_reach_a_running_client_and_a_bad_value_keeps_the_last_good_one(
        api, start_scheduler):
    uid = api.add_pod(NAME, namespace=NAMESPACE, node=NODE, uid=POD_UID)
    api.add_pod("on-node-b", namespace=NAMESPACE, node="node-b", annotations={COMPUTE_LIMIT: "5"})
    scheduler = start_scheduler()   # an edit from now on is a watch event

    client = FakeClient(scheduler.sock, timeout=WAIT)
    welcome = client.hello(pod_name="claimed", pod_namespace="elsewhere")
    assert welcome.features & FEATURE_QUOTAS
    client.send_raw(encode(Settings(compute_limit=0, compute_share=0, memory_limit=0)))
    assert client.expect(MessageType.LIMITS) == Limits(compute_limit=0, memory_limit=0)
    client.attach(0)
    (me,) = client.ctl("status")["clients"]
    assert me["pod"] == {"namespace": NAMESPACE, "name": NAME, "uid": POD_UID,
                         "container_id": CONTAINER}          # the kernel's side, not the hint
    assert me["pod_hint"] == {"namespace": "elsewhere", "name": "claimed"}

    # A compute limit, then a memory limit beside it: each edit is one LIMITS, within a second.
    limits, took = limits_after(client, lambda: api.modify(uid, {COMPUTE_LIMIT: "40"}))
    assert limits == Limits(compute_limit=400, memory_limit=0)  # per mille
    assert took < APPLY_BOUND, f"LIMITS came {took:.2f}s after the edit"
    limits, took = limits_after(client, lambda: api.modify(uid, {COMPUTE_LIMIT: "40",
                                                                 MEMORY_LIMIT: "1GiB"}))
    assert limits == Limits(compute_limit=400, memory_limit=GiB)
    assert took < APPLY_BOUND, f"LIMITS came {took:.2f}s after the edit"

    # An invalid value: a Warning Event on the pod and a line in the log; the previous value stays.
    api.modify(uid, {COMPUTE_LIMIT: "150", MEMORY_LIMIT: "1GiB"})
    assert api.wait(lambda: api.events, timeout=WAIT), scheduler.log()
    (event,) = api.events
    assert event["_namespace"] == NAMESPACE and event["type"] == "Warning"
    assert event["reason"] == EVENT_REASON
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "namespace": NAMESPACE,
                                       "name": NAME, "uid": POD_UID,
                                       "resourceVersion": api.pods[uid]["metadata"]["resourceVersion"]}
    assert "'150'" in event["message"] and COMPUTE_LIMIT in event["message"]
    assert "keeping the previous value" in event["message"]
    logged = scheduler.wait_log(f"pod {NAMESPACE}/{NAME}: invalid value '150' for annotation "
                                f"{COMPUTE_LIMIT}", timeout=WAIT)
    assert "keeping the previous value" in logged

    # Frames on a connection come in order: the next LIMITS, for a later valid edit, is the next
    # frame, so the bad value sent none; and no further frame precedes the status reply after it.
    limits, took = limits_after(client, lambda: api.modify(uid, {COMPUTE_LIMIT: "25",
                                                                 MEMORY_LIMIT: "1GiB"}))
    assert limits == Limits(compute_limit=250, memory_limit=GiB)
    (me,) = client.ctl("status")["clients"]
    assert me["quota"]["compute_limit"] == 25 and me["quota"]["memory_limit"] == GiB
    assert me["quota"]["sources"] == {"compute_limit": "annotation", "compute_share": "environment",
                                      "memory_limit": "annotation", "latency_sensitive": "environment"}
    assert len(api.events) == 1                               # once per pod, annotation and value
    assert "on-node-b" not in scheduler.log()                 # the other node's pod never came
    client.close()


def test_removing_the_annotations_goes_back_to_the_environment(api, start_scheduler):
    uid = api.add_pod(NAME, namespace=NAMESPACE, node=NODE, uid=POD_UID,
                      annotations={MEMORY_LIMIT: "2GiB"})
    scheduler = start_scheduler()
    client = FakeClient(scheduler.sock, timeout=WAIT)
    client.hello()
    # The environment asks for 30% and 4 GiB; the annotation, listed before the client came, wins.
    client.send_raw(encode(Settings(compute_limit=300, compute_share=0, memory_limit=4 * GiB)))
    assert client.expect(MessageType.LIMITS) == Limits(compute_limit=300, memory_limit=2 * GiB)
    limits, took = limits_after(client, lambda: api.modify(uid, {}))
    assert limits == Limits(compute_limit=300, memory_limit=4 * GiB)
    assert took < APPLY_BOUND, f"LIMITS came {took:.2f}s after the edit"
    limits, _ = limits_after(client, lambda: api.modify(uid, {COMPUTE_LIMIT: "none"}))
    assert limits == Limits(compute_limit=0, memory_limit=4 * GiB)   # "none" overrides the 30%
    limits, _ = limits_after(client, lambda: api.delete(uid))
    assert limits == Limits(compute_limit=300, memory_limit=4 * GiB)
    client.close()
