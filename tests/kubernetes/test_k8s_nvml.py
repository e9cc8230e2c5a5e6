"""The device plugin against real NVML (GPU machines only; skipped where NVML does not initialise).

Read-only NVML use: discovery, event registration, event waits and memory-info probes. Nothing
changes GPU settings.
"""

from __future__ import annotations

import time

import pytest

from xpushare.kubernetes import devices as dev
from xpushare.kubernetes.health import HealthBoard, NvmlHealthMonitor
from xpushare.kubernetes.proto import deviceplugin_pb2 as pb

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def gpus():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"NVML does not initialise here: {e}")
    found = dev.discover_nvml()
    if not found:
        pytest.skip("NVML found no GPUs")
    return found


def test_discovery(gpus):
    import pynvml
    assert len(gpus) == pynvml.nvmlDeviceGetCount()
    for i, g in enumerate(gpus):
        uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
        assert g.uuid == (uuid.decode() if isinstance(uuid, bytes) else uuid)
        assert g.index == i
        assert g.minor is not None and g.minor >= 0
        assert len(dev.device_id(g.uuid, 999)) <= 63
    print("GPUs:", gpus)


def test_health_monitor_quiet_on_a_healthy_gpu(gpus):
    changes = []
    board = HealthBoard([g.uuid for g in gpus], lambda u, h, r: changes.append((u, h, r)))
    mon = NvmlHealthMonitor([g.uuid for g in gpus], probe_interval=0.5, wait_ms=200)
    mon.board = board
    mon.setup()
    assert mon._registered == {g.uuid for g in gpus}
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        mon.poll_once()
    assert changes == [] and all(board.healthy(g.uuid) for g in gpus)


def test_plugin_process_with_nvml(gpus, kubelet, start_plugin):
    # no --gpu-uuids: the real process discovers the GPUs and watches them through NVML
    plugin = start_plugin("--nvml-health", "on", "--virtual-devices", "3")
    try:
        kubelet.wait_registration(timeout=60)
    except Exception:
        pytest.fail("plugin did not register; its log:\n" + plugin.output())
    devs = kubelet.wait_update()
    assert [d.ID for d in devs] == [dev.device_id(g.uuid, n) for g in gpus for n in range(3)]
    assert all(d.health == "Healthy" for d in devs)
    for d in devs:
        gpu = next(g for g in gpus if d.ID.startswith(g.uuid))
        assert [n.ID for n in d.topology.nodes] == ([gpu.numa_node] if gpu.numa_node is not None else [])
    time.sleep(3)  # a few health-check rounds
    assert kubelet.updates.empty(), "health flapped on a healthy GPU"
    resp = kubelet.stub("nvshare-gpu.sock").Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=[devs[0].ID])]), timeout=10)
    assert resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == gpus[0].uuid
    out = plugin.output()
    for bad in ("cannot register NVML events", "health source nvml failed", "lost", "Unhealthy",
                "Traceback"):
        assert bad not in out, out
    print(out)
