"""In-process tests of the device plugin's parts: placement, GPU lists, Allocate details,
library installation and the health sources (NVML through a fake pynvml)."""

from __future__ import annotations

import json
import mmap
import os
import threading
import types

import grpc
import pytest

from xpushare.kubernetes import devices as dev
from xpushare.kubernetes.health import (FileHealthSource, HealthBoard, NvmlHealthMonitor,
                                        NVML_ERROR_GPU_IS_LOST, NVML_ERROR_TIMEOUT,
                                        NVML_EVENT_TYPE_XID_CRITICAL)
from xpushare.kubernetes.libinstall import clean_stale_temps, install_library
from xpushare.kubernetes.plugin import AllocateConfig, DeviceState, DevicePluginService, build_parser
from xpushare.kubernetes.proto import deviceplugin_pb2 as pb

A = "GPU-11111111-2222-3333-4444-555555555555"
B = "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa"
C = "GPU-cccccccc-7777-8888-9999-aaaaaaaaaaaa"


# ---------------------------------------------------------------------------------------------
# device IDs and GPU lists

def test_device_id_round_trip():
    assert dev.device_id(A, 7) == f"{A}::7"
    assert dev.split_device_id(f"{A}::7") == (A, 7)
    for bad in ["", A, f"{A}::", f"{A}::x", "::3"]:
        with pytest.raises(ValueError):
            dev.split_device_id(bad)


def test_parse_gpu_list():
    gpus = dev.parse_gpu_list(f" {A}:numa=1:minor=3 , {B} ,{C}:numa=-1")
    assert gpus == [dev.PhysicalGPU(A, 0, 1, 3), dev.PhysicalGPU(B, 1, None, None),
                    dev.PhysicalGPU(C, 2, None, None)]
    for bad, msg in [("", "no GPU"), ("foo", "not a GPU UUID"), (f"{A},{A}", "twice"),
                     (f"{A}:numa", "bad GPU attribute"), (f"{A}:speed=3", "unknown GPU attribute")]:
        with pytest.raises(ValueError, match=msg):
            dev.parse_gpu_list(bad)


def test_mig_uuid_accepted():
    mig = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
    assert dev.parse_gpu_list(mig)[0].uuid == mig


def test_discover_nvml_with_fake(tmp_path):
    sysfs = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:3b:00.0"
    sysfs.mkdir(parents=True)
    (sysfs / "numa_node").write_text("1\n")

    class Handle(int):
        pass

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: Handle(i),
        nvmlDeviceGetUUID=lambda h: [A, B.encode()][h],
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=["00000000:3B:00.0", "00000000:AF:00.0"][h]),
        nvmlDeviceGetMinorNumber=lambda h: [0, 1][h])
    gpus = dev.discover_nvml(fake, sys_root=str(tmp_path / "sys"))
    assert gpus == [dev.PhysicalGPU(A, 0, 1, 0), dev.PhysicalGPU(B, 1, None, 1)]


def test_discover_nvml_failure_is_runtime_error():
    def boom():
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")
    with pytest.raises(RuntimeError, match="NVML"):
        dev.discover_nvml(types.SimpleNamespace(nvmlInit=boom))


# ---------------------------------------------------------------------------------------------
# placement

def _all(uuid, n=4):
    return [dev.device_id(uuid, i) for i in range(n)]


def test_preferred_single_unit_goes_to_least_loaded():
    units = {A: 4, B: 4, C: 4}
    order = {A: 0, B: 1, C: 2}
    available = _all(A)[2:] + _all(B)[1:] + _all(C)[3:]   # loads: A=2, B=1, C=3
    assert dev.preferred_allocation(available, [], 1, units, order) == [f"{B}::1"]


def test_preferred_ties_break_by_node_order():
    units = {A: 4, B: 4}
    assert dev.preferred_allocation(_all(B) + _all(A), [], 1, units, {A: 0, B: 1}) == [f"{A}::0"]


def test_preferred_multi_unit_distinct_gpus():
    units = {A: 4, B: 4, C: 4}
    picked = dev.preferred_allocation(_all(A) + _all(B) + _all(C), [], 3, units, {A: 0, B: 1, C: 2})
    assert sorted(dev.split_device_id(d)[0] for d in picked) == [A, B, C]


def test_preferred_falls_back_when_too_few_gpus():
    picked = dev.preferred_allocation(_all(A), [], 2, {A: 4}, {A: 0})
    assert picked == [f"{A}::0", f"{A}::1"]  # best effort; Allocate refuses it with a clear error


def test_preferred_keeps_must_include_and_ignores_junk():
    picked = dev.preferred_allocation(["junk"] + _all(A) + _all(B), [f"{A}::2"], 2, {A: 4, B: 4})
    assert picked == [f"{A}::2", f"{B}::0"]


def test_check_allocation():
    known = {A: dev.PhysicalGPU(A, 0), B: dev.PhysicalGPU(B, 1)}
    assert [g.uuid for g in dev.check_allocation([f"{B}::1", f"{A}::0"], known, 4)] == [B, A]
    with pytest.raises(dev.AllocationError, match="distinct physical GPUs"):
        dev.check_allocation([f"{A}::1", f"{A}::0"], known, 4)
    with pytest.raises(dev.AllocationError, match="unknown device ID"):
        dev.check_allocation([f"{A}::4"], known, 4)
    with pytest.raises(dev.AllocationError, match="empty"):
        dev.check_allocation([], known, 4)


# ---------------------------------------------------------------------------------------------
# Allocate details in-process

class _Abort(Exception):
    pass


class _Ctx:
    def abort(self, code, details):
        self.code, self.details = code, details
        raise _Abort(details)


def _service(tmp_path, **kw):
    libdir = tmp_path / "lib"
    libdir.mkdir()
    (libdir / "libnvshare.so").write_bytes(b"x")
    gpus = [dev.PhysicalGPU(A, 0, 0, 0), dev.PhysicalGPU(B, 1, 1, 1)]
    cfg = AllocateConfig(str(libdir), "/opt/nvshare", "/run/nvs", "/nvs", kw.pop("extra_env", {}),
                         kw.pop("pass_device_specs", False), dev_root=str(tmp_path / "root"))
    return DevicePluginService(DeviceState(gpus, 2), cfg, threading.Event()), libdir


def test_allocate_custom_paths_and_env(tmp_path):
    svc, libdir = _service(tmp_path, extra_env={"NVSHARE_DEBUG": "1", "LD_PRELOAD": "ignored"})
    r = svc.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
        devices_ids=[f"{A}::1"])]), _Ctx()).container_responses[0]
    assert dict(r.envs) == {"NVSHARE_DEBUG": "1", "LD_PRELOAD": "/opt/nvshare/libnvshare.so",
                            "NVIDIA_VISIBLE_DEVICES": A, "NVSHARE_SOCK_PATH": "/nvs/scheduler.sock"}
    assert [(m.container_path, m.host_path, m.read_only) for m in r.mounts] == [
        ("/opt/nvshare", str(libdir), True), ("/nvs", "/run/nvs", True)]


def test_allocate_pass_device_specs(tmp_path):
    svc, _ = _service(tmp_path, pass_device_specs=True)
    devroot = tmp_path / "root" / "dev"
    devroot.mkdir(parents=True)
    for name in ["nvidiactl", "nvidia-uvm", "nvidia1", "nvidia0"]:
        (devroot / name).write_text("")
    r = svc.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
        devices_ids=[f"{B}::0"])]), _Ctx()).container_responses[0]
    assert [(d.container_path, d.host_path, d.permissions) for d in r.devices] == [
        ("/dev/nvidiactl", "/dev/nvidiactl", "rw"), ("/dev/nvidia-uvm", "/dev/nvidia-uvm", "rw"),
        ("/dev/nvidia1", "/dev/nvidia1", "rw")]  # uvm-tools absent on this "host"; only B's node


def test_allocate_refuses_without_installed_library(tmp_path):
    svc, libdir = _service(tmp_path)
    (libdir / "libnvshare.so").unlink()
    ctx = _Ctx()
    with pytest.raises(_Abort):
        svc.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
            devices_ids=[f"{A}::0"])]), ctx)
    assert ctx.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "libnvshare.so" in ctx.details


def test_cli_defaults_and_validation(monkeypatch):
    monkeypatch.delenv("NVSHARE_VIRTUAL_DEVICES", raising=False)
    args = build_parser().parse_args([])
    assert args.virtual_devices == 10
    assert args.device_plugin_dir == "/var/lib/kubelet/device-plugins"
    assert args.host_lib_dir == "/var/lib/nvshare/lib"
    assert args.container_lib_dir == "/usr/local/nvshare/lib"
    assert args.host_socket_dir == args.container_socket_dir == "/var/run/nvshare"
    assert args.ignored_xids == frozenset({13, 31, 43, 45, 68, 109})
    for bad in (["--virtual-devices", "0"], ["--virtual-devices", "x"], ["--container-env", "novalue"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(bad)


# ---------------------------------------------------------------------------------------------
# library installation

def test_install_is_atomic_for_running_containers(tmp_path):
    src1 = tmp_path / "v1.so"
    src2 = tmp_path / "v2.so"
    src1.write_bytes(b"version-one" * 1000)
    src2.write_bytes(b"version-two!" * 1000)
    dest_dir = tmp_path / "host" / "lib"
    installed = install_library(src1, dest_dir)
    assert installed == dest_dir / "libnvshare.so"
    assert os.stat(installed).st_mode & 0o777 == 0o755

    # a "running container" maps the installed file
    with open(installed, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    inode1 = os.stat(installed).st_ino

    # same bytes again: nothing changes (same inode)
    install_library(src1, dest_dir)
    assert os.stat(installed).st_ino == inode1

    # new bytes: a new inode at the same name; the old mapping still reads the old bytes
    install_library(src2, dest_dir)
    assert os.stat(installed).st_ino != inode1
    assert installed.read_bytes() == src2.read_bytes()
    assert mapped[:11] == b"version-one" and len(mapped) == 11000
    mapped.close()
    assert sorted(os.listdir(dest_dir)) == ["libnvshare.so"]  # no temp files left


def test_install_failure_keeps_old_file(tmp_path):
    dest_dir = tmp_path / "lib"
    src = tmp_path / "a.so"
    src.write_bytes(b"good")
    install_library(src, dest_dir)
    with pytest.raises(FileNotFoundError):
        install_library(tmp_path / "missing.so", dest_dir)
    assert (dest_dir / "libnvshare.so").read_bytes() == b"good"
    (dest_dir / ".libnvshare.so.abc.tmp").write_bytes(b"half")
    clean_stale_temps(dest_dir)
    assert os.listdir(dest_dir) == ["libnvshare.so"]


# ---------------------------------------------------------------------------------------------
# health

def test_health_board_combines_sources():
    changes = []
    board = HealthBoard([A, B], lambda u, h, r: changes.append((u, h)))
    board.set("nvml", A, False, "xid")
    board.set("file", A, False, "drain")
    board.set("nvml", A, True)
    assert changes == [(A, False)] and not board.healthy(A)
    board.set("file", A, True)
    assert changes == [(A, False), (A, True)] and board.healthy(A)
    board.set("nvml", "GPU-unknown", False)  # not ours: ignored
    assert len(changes) == 2


def test_file_health_source(tmp_path):
    path = tmp_path / "health.json"
    src = FileHealthSource(str(path), [A, B])
    assert src.read() == {A: (True, "marked Unhealthy in health file"), B: (True, "marked Unhealthy in health file")}
    path.write_text(json.dumps({A: "Unhealthy", B: {"health": "Unhealthy", "reason": "fan"}}))
    assert src.read() == {A: (False, "marked Unhealthy in health file"), B: (False, "fan")}
    assert src.read() == {}  # unchanged file: nothing to report
    path.write_text("{not json")
    assert src.read() is None  # keeps the previous state
    path.write_text(json.dumps({B: "Healthy"}))
    assert src.read()[A][0] is True


class FakeNvml:
    """Just enough of pynvml for NvmlHealthMonitor."""

    class Error(Exception):
        def __init__(self, value):
            super().__init__(f"NVML error {value}")
            self.value = value

    def __init__(self, uuids):
        self.uuids = list(uuids)
        self.events = []          # queued event data
        self.lost = set()
        self.registered = []

    def nvmlInit(self):
        pass

    def nvmlEventSetCreate(self):
        return "set"

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid in self.lost:
            raise self.Error(NVML_ERROR_GPU_IS_LOST)
        return ("h", uuid)

    def nvmlDeviceGetSupportedEventTypes(self, handle):
        return 0xFF

    def nvmlDeviceRegisterEvents(self, handle, mask, event_set):
        self.registered.append((handle[1], mask))

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        if not self.events:
            raise self.Error(NVML_ERROR_TIMEOUT)
        return self.events.pop(0)

    def nvmlDeviceGetUUID(self, handle):
        return handle[1].encode()

    def nvmlDeviceGetMemoryInfo(self, handle):
        if handle[1] in self.lost:
            raise self.Error(NVML_ERROR_GPU_IS_LOST)
        return types.SimpleNamespace(total=1, free=1, used=0)

    def xid(self, uuid, xid):
        self.events.append(types.SimpleNamespace(device=("h", uuid), eventType=NVML_EVENT_TYPE_XID_CRITICAL,
                                                 eventData=xid))


def _monitor(nvml, now, **kw):
    changes = []
    board = HealthBoard([A, B], lambda u, h, r: changes.append((u, h, r)))
    mon = NvmlHealthMonitor([A, B], nvml=nvml, probe_interval=10, wait_ms=1, clock=lambda: now[0], **kw)
    mon.board = board
    return mon, board, changes


def test_nvml_critical_xid_then_recovery():
    nvml = FakeNvml([A, B])
    now = [1000.0]
    mon, board, changes = _monitor(nvml, now, xid_recovery_s=60)
    mon.poll_once()
    assert {u for u, _ in nvml.registered} == {A, B}
    nvml.xid(A, 31)          # application page fault: ignored
    mon.poll_once()
    assert changes == []
    nvml.xid(A, 79)          # fallen off the bus: critical
    mon.poll_once()
    assert changes == [(A, False, "nvml: critical XID 79")]
    now[0] += 30
    mon.poll_once()          # probe ok but too soon
    assert board.healthy(A) is False
    now[0] += 31
    mon.poll_once()
    assert changes[-1][:2] == (A, True) and board.healthy(A) and board.healthy(B)


def test_nvml_xid_without_recovery_stays_unhealthy():
    nvml = FakeNvml([A, B])
    now = [0.0]
    mon, board, _ = _monitor(nvml, now, xid_recovery_s=0)
    nvml.xid(B, 48)
    mon.poll_once()
    for _ in range(3):
        now[0] += 1000
        mon.poll_once()
    assert board.healthy(B) is False and board.healthy(A) is True


def test_nvml_lost_gpu_then_back():
    nvml = FakeNvml([A, B])
    now = [0.0]
    mon, board, changes = _monitor(nvml, now)
    mon.poll_once()
    nvml.lost.add(B)
    now[0] += 10
    mon.poll_once()
    assert board.healthy(B) is False and changes[-1][0] == B and "lost" in changes[-1][2]
    nvml.lost.clear()
    now[0] += 10
    mon.poll_once()
    assert board.healthy(B) is True
    assert [u for u, _ in nvml.registered].count(B) == 2  # events re-registered after recovery


def test_nvml_custom_ignored_xids():
    nvml = FakeNvml([A, B])
    mon, board, _ = _monitor(nvml, [0.0], ignored_xids={79})
    nvml.xid(A, 79)
    mon.poll_once()
    assert board.healthy(A)
    nvml.xid(A, 31)
    mon.poll_once()
    assert not board.healthy(A)
