"""What status shows to a process in a pod (access.Viewer): the clients of its own pod, in full;
every other client counted, even one of the same uid in another pod. GPU pods run as root unless
told otherwise, so matching by uid alone showed root in pod A every client of root in pod B: its
command line, pid, pod and bytes. The node's admin (root in no pod) still sees every client.

NVSHARE_POD_IDENTITY_ROOT stands in for the kernel's cgroups and the kubelet's pod log directories;
a pod is looked up once per connection, when it is made, so this one process opens its connections
"in" pod A, then pod B, then on the node, by what the stand-in says of its pid at each connect.
"""

from __future__ import annotations

import os

from sched_harness import FakeClient, registered

GiB = 1 << 30
POD_A = ("team-a", "trainer-a", "aaaaaaaa-1111-4222-8333-444444444444")
POD_B = ("team-b", "trainer-b", "bbbbbbbb-1111-4222-8333-444444444444")


def _place(root, pod) -> None:
    """What the kernel and the kubelet show of this process: in `pod`, or (None) in none."""
    proc = root / "proc" / str(os.getpid())
    proc.mkdir(parents=True, exist_ok=True)
    cgroup = proc / "cgroup"
    if pod is None:
        cgroup.unlink(missing_ok=True)
        return
    namespace, name, uid = pod
    cgroup.write_text("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
                      f"{uid.replace('-', '_')}.slice/cri-containerd-{'ab' * 32}.scope\n")
    (root / "var" / "log" / "pods" / f"{namespace}_{name}_{uid}").mkdir(parents=True, exist_ok=True)


def _pods_of(status) -> list:
    return sorted((c["pod"] or {}).get("name") or "node" for c in status["clients"])


def test_root_in_one_pod_sees_only_its_own_pods_clients_and_counts_the_rest(start_scheduler, tmp_path):
    identity = tmp_path / "identity"
    s = start_scheduler("--no-nvml", env={"NVSHARE_POD_IDENTITY_ROOT": str(identity)})
    clients = []
    try:
        for pod, n in ((POD_A, 2), (POD_B, 1)):
            _place(identity, pod)
            for _ in range(n):
                c = registered(s.sock)
                c.mem_update(0, managed=GiB)
                clients.append(c)
        a, _, b = clients
        _place(identity, None)
        with FakeClient(s.sock) as host_root:
            full = host_root.ctl("status")
        seen_by_a, seen_by_b = a.ctl("status"), b.ctl("status")
    finally:
        for c in clients:
            c.close()
    assert {c["uid"] for c in full["clients"]} == {os.geteuid()}  # one uid in both pods
    assert _pods_of(full) == ["trainer-a", "trainer-a", "trainer-b"]  # the admin: all, in full
    assert "other_users_clients" not in full

    assert _pods_of(seen_by_a) == ["trainer-a", "trainer-a"]
    assert seen_by_a["other_users_clients"] == 1
    (gpu,) = seen_by_a["gpus"]
    assert gpu["other_users_clients"] == 1 and gpu["other_users_bytes"] == GiB
    assert "trainer-b" not in str(seen_by_a) and "team-b" not in str(seen_by_a)

    assert _pods_of(seen_by_b) == ["trainer-b"]
    assert seen_by_b["other_users_clients"] == 2
    assert "trainer-a" not in str(seen_by_b)
