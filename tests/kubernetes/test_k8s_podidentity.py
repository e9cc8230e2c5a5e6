"""pid -> pod resolution against /proc/<pid>/cgroup fixtures of every supported shape."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from xpushare.kubernetes.podidentity import (PodIdentity, parse_cgroup_file, parse_cgroup_path,
                                             pod_identity, pod_names_from_logs)

FIXTURES = Path(__file__).parent / "fixtures" / "cgroup"
UID = "7c1b8e2a-4f3d-4a6b-9c2e-0d5f6a7b8c9d"
HASH = "2f8c5d1e9a7b3c4d6e0f1a2b3c4d5e6f"
CID = "3f9a1c0e5b7d2468ace13579bdf02468ace13579bdf02468ace13579bdf02468"

# fixture -> (pod uid, qos, container id, runtime, cgroup driver); None: not a pod
EXPECTED = {
    "v1-cgroupfs-docker-burstable": (UID, "burstable", CID, None, "cgroupfs"),
    "v1-cgroupfs-containerd-guaranteed": (UID, "guaranteed", CID, None, "cgroupfs"),
    "v1-cgroupfs-crio-besteffort": (UID, "besteffort", CID, "cri-o", "cgroupfs"),
    "v1-systemd-docker-guaranteed": (UID, "guaranteed", CID, "docker", "systemd"),
    "v1-systemd-containerd-burstable": (UID, "burstable", CID, "containerd", "systemd"),
    "v1-systemd-crio-besteffort": (UID, "besteffort", CID, "cri-o", "systemd"),
    "v1-systemd-crio-conmon-burstable": (UID, "burstable", None, None, "systemd"),
    "hybrid-systemd-containerd-burstable": (UID, "burstable", CID, "containerd", "systemd"),
    "v2-systemd-containerd-besteffort": (UID, "besteffort", CID, "containerd", "systemd"),
    "v2-systemd-containerd-guaranteed": (UID, "guaranteed", CID, "containerd", "systemd"),
    "v2-systemd-crio-burstable": (UID, "burstable", CID, "cri-o", "systemd"),
    "v2-systemd-docker-burstable": (UID, "burstable", CID, "docker", "systemd"),
    "v2-cgroupfs-containerd-burstable": (UID, "burstable", CID, None, "cgroupfs"),
    "v2-cgroupfs-crio-guaranteed": (UID, "guaranteed", CID, "cri-o", "cgroupfs"),
    "v2-cgroupfs-containerd-besteffort": (UID, "besteffort", CID, None, "cgroupfs"),
    "v2-kind-node-containerd-burstable": (UID, "burstable", CID, "containerd", "systemd"),
    "v2-private-cgroupns-containerd-besteffort": (UID, "besteffort", CID, "containerd", "systemd"),
    "v2-static-pod-containerd-guaranteed": (HASH, "guaranteed", CID, "containerd", "systemd"),
    "v2-host-session": None,
    "v2-plain-docker-not-k8s": None,
    "v1-host-service": None,
}


def test_every_fixture_has_an_expectation():
    assert sorted(p.stem for p in FIXTURES.glob("*.cgroup")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parse_fixture(name):
    ref = parse_cgroup_file((FIXTURES / f"{name}.cgroup").read_text())
    expected = EXPECTED[name]
    if expected is None:
        assert ref is None
    else:
        assert tuple(ref) == expected


def _fake_proc(tmp_path: Path, pid: int, fixture: str) -> str:
    proc = tmp_path / "proc"
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cgroup").write_text((FIXTURES / f"{fixture}.cgroup").read_text())
    return str(proc)


def _fake_logs(tmp_path: Path, *dirs: str) -> str:
    logs = tmp_path / "var-log-pods"
    logs.mkdir()
    for d in dirs:
        (logs / d).mkdir()
        (logs / d / "main").mkdir()  # per-container directories live below
    return str(logs)


@pytest.mark.parametrize("name", [n for n, e in sorted(EXPECTED.items()) if e is not None])
def test_pod_identity_with_names(tmp_path, name):
    uid, _, cid, _, _ = EXPECTED[name]
    proc = _fake_proc(tmp_path, 4242, name)
    logs = _fake_logs(tmp_path, f"ml-team_trainer-7f9c-0_{uid}", "kube-system_coredns-1_0000",
                      f"other_pod_{UID[:-1]}0")
    ident = pod_identity(4242, proc_root=proc, pod_log_root=logs)
    assert ident == PodIdentity(uid=uid, namespace="ml-team", name="trainer-7f9c-0", container_id=cid)
    assert str(ident) == "ml-team/trainer-7f9c-0"


def test_pod_identity_without_log_dir(tmp_path):
    proc = _fake_proc(tmp_path, 7, "v2-systemd-containerd-besteffort")
    ident = pod_identity(7, proc_root=proc, pod_log_root=str(tmp_path / "missing"))
    assert ident == PodIdentity(uid=UID, namespace=None, name=None, container_id=CID)
    assert str(ident) == f"pod {UID}"


def test_not_a_pod_and_missing_pid(tmp_path):
    proc = _fake_proc(tmp_path, 9, "v2-host-session")
    assert pod_identity(9, proc_root=proc) is None
    assert pod_identity(10, proc_root=proc) is None      # no such pid
    assert pod_identity("x", proc_root=proc) is None     # nonsense in, None out


def test_real_proc_self_is_not_misread():
    # this test process is not a pod container (or, when CI runs in a pod, is one): never raises
    ident = pod_identity(os.getpid())
    assert ident is None or isinstance(ident, PodIdentity)


def test_identity_is_frozen_and_hashable():
    ident = PodIdentity(uid=UID, namespace="a", name="b", container_id=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ident.name = "c"  # type: ignore[misc]
    assert {ident: 1}[PodIdentity(UID, "a", "b", None)] == 1


def test_log_dir_names_need_exact_uid(tmp_path):
    logs = _fake_logs(tmp_path, f"ns_name_{UID}x", f"ns_na_me_{UID}", f"good_pod_{UID}")
    assert pod_names_from_logs(UID, logs) == ("good", "pod")
    assert pod_names_from_logs("nope", logs) == (None, None)


@pytest.mark.parametrize("path", [
    "/kubepods/burstable/podnot-a-uid/" + CID,                  # malformed uid
    "/burstable/pod" + UID + "/" + CID,                          # no kubepods parent
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + UID + ".scope",  # not a slice
    "/system.slice/containerd.service",
    "",
])
def test_rejects_lookalikes(path):
    assert parse_cgroup_path(path) is None


def test_container_line_beats_pod_only_line():
    text = ("2:cpu:/kubepods/burstable/pod" + UID + "\n"
            "1:memory:/kubepods/burstable/pod" + UID + "/" + CID + "\n")
    ref = parse_cgroup_file(text)
    assert ref.container_id == CID


def test_module_is_stdlib_only():
    import ast
    import sys

    import xpushare.kubernetes.podidentity as mod
    tree = ast.parse(Path(mod.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)
