"""The real nvshare-device-plugin process driven by a fake kubelet over gRPC on Unix sockets."""

from __future__ import annotations

import os
import signal
import stat

import grpc
import pytest

from testkit.waiting import poll

from .k8s_helpers import GPU_A, GPU_B, FakeKubelet
from xpushare.kubernetes.proto import deviceplugin_pb2 as pb

pytestmark = pytest.mark.timeout(90)

ENDPOINT = "nvshare-gpu.sock"


def _ids(devs):
    return [d.ID for d in devs]


def _health(devs):
    return {d.ID: d.health for d in devs}


def _by_gpu(devs, uuid):
    return [d for d in devs if d.ID.startswith(uuid + "::")]


@pytest.fixture
def running(kubelet, start_plugin):
    """Plugin with GPU_A (NUMA 1) and GPU_B (no NUMA), 4 units each, registered with the kubelet."""
    plugin = start_plugin("--gpu-uuids", f"{GPU_A}:numa=1,{GPU_B}", "--virtual-devices", "4")
    try:
        req = kubelet.wait_registration(timeout=30)
    except Exception:
        pytest.fail("plugin did not register; its log:\n" + plugin.output())
    first = kubelet.wait_update()
    return plugin, kubelet, req, first


def test_registration_fields(running):
    plugin, kubelet, req, _ = running
    assert req.version == "v1beta1"
    assert req.endpoint == ENDPOINT
    assert req.resource_name == "nvshare.com/gpu"
    assert req.options.get_preferred_allocation_available is True
    assert req.options.pre_start_required is False
    # the plugin serves on <dir>/<endpoint>, and answered the kubelet's dial-back
    assert stat.S_ISSOCK(os.stat(os.path.join(plugin.plugin_dir, ENDPOINT)).st_mode)
    opts = poll(lambda: kubelet.options, timeout=20, interval=0.05, what="GetDevicePluginOptions")[0]
    assert opts.get_preferred_allocation_available and not opts.pre_start_required


def test_list_and_watch_contents(running):
    _, _, _, devs = running
    expected = [f"{GPU_A}::{n}" for n in range(4)] + [f"{GPU_B}::{n}" for n in range(4)]
    assert _ids(devs) == expected
    assert len(set(_ids(devs))) == 8
    assert all(d.health == "Healthy" for d in devs)
    assert all(len(d.ID) <= 63 for d in devs)
    for d in _by_gpu(devs, GPU_A):
        assert [n.ID for n in d.topology.nodes] == [1]
    for d in _by_gpu(devs, GPU_B):
        assert not d.HasField("topology")


def test_health_change_updates_stream(running):
    plugin, kubelet, _, _ = running
    plugin.set_health({GPU_A: {"health": "Unhealthy", "reason": "test XID"}})
    devs = kubelet.wait_update(lambda d: _health(d)[f"{GPU_A}::0"] == "Unhealthy")
    assert all(d.health == "Unhealthy" for d in _by_gpu(devs, GPU_A))
    assert all(d.health == "Healthy" for d in _by_gpu(devs, GPU_B))
    assert len(devs) == 8  # unhealthy devices stay listed

    plugin.set_health({})
    devs = kubelet.wait_update(lambda d: _health(d)[f"{GPU_A}::0"] == "Healthy")
    assert all(d.health == "Healthy" for d in devs)
    assert "Unhealthy" in plugin.output()


def test_second_watcher_gets_current_state(running):
    plugin, kubelet, _, _ = running
    plugin.set_health({GPU_B: "Unhealthy"})
    kubelet.wait_update(lambda d: _health(d)[f"{GPU_B}::3"] == "Unhealthy")
    stream = kubelet.stub(ENDPOINT).ListAndWatch(pb.Empty(), timeout=10)
    first = next(stream)
    assert _health(first.devices)[f"{GPU_B}::0"] == "Unhealthy"
    assert _health(first.devices)[f"{GPU_A}::0"] == "Healthy"
    stream.cancel()


def test_allocate_one_unit(running):
    plugin, kubelet, _, _ = running
    resp = kubelet.stub(ENDPOINT).Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=[f"{GPU_B}::2"])]), timeout=10)
    assert len(resp.container_responses) == 1
    c = resp.container_responses[0]
    assert dict(c.envs) == {
        "LD_PRELOAD": "/usr/local/nvshare/lib/libnvshare.so",
        "NVIDIA_VISIBLE_DEVICES": GPU_B,
        "NVSHARE_SOCK_PATH": "/var/run/nvshare/scheduler.sock",
    }
    mounts = {m.container_path: (m.host_path, m.read_only) for m in c.mounts}
    assert mounts == {
        "/usr/local/nvshare/lib": (plugin.lib_dir, True),
        "/var/run/nvshare": ("/var/run/nvshare", True),
    }
    assert list(c.devices) == []  # the NVIDIA container runtime injects /dev/nvidia* itself
    assert list(c.cdi_devices) == []
    # the library that the mount exposes was installed, byte for byte
    with open(os.path.join(plugin.lib_dir, "libnvshare.so"), "rb") as f, open(plugin.library, "rb") as g:
        assert f.read() == g.read()
    assert os.stat(os.path.join(plugin.lib_dir, "libnvshare.so")).st_mode & 0o777 == 0o755


def test_allocate_several_containers_and_units(running):
    _, kubelet, _, _ = running
    resp = kubelet.stub(ENDPOINT).Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=[f"{GPU_A}::0", f"{GPU_B}::1"]),
        pb.ContainerAllocateRequest(devices_ids=[f"{GPU_A}::3"]),
    ]), timeout=10)
    assert [c.envs["NVIDIA_VISIBLE_DEVICES"] for c in resp.container_responses] == [f"{GPU_A},{GPU_B}", GPU_A]


def test_allocate_refuses_two_units_of_one_gpu(running):
    _, kubelet, _, _ = running
    with pytest.raises(grpc.RpcError) as err:
        kubelet.stub(ENDPOINT).Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[f"{GPU_A}::0", f"{GPU_A}::1"])]), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "distinct physical GPUs" in err.value.details()
    assert GPU_A in err.value.details()


def test_allocate_refuses_unknown_device(running):
    _, kubelet, _, _ = running
    for bad in ["GPU-00000000-0000-0000-0000-000000000000::0", f"{GPU_A}::4", "nonsense"]:
        with pytest.raises(grpc.RpcError) as err:
            kubelet.stub(ENDPOINT).Allocate(pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=[bad])]), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "unknown device ID" in err.value.details()


def test_preferred_allocation_spreads_by_load(running):
    _, kubelet, _, _ = running
    stub = kubelet.stub(ENDPOINT)
    # GPU_A already has 3 units handed out (only ::3 available); GPU_B has 1 (::0 taken)
    available = [f"{GPU_A}::3", f"{GPU_B}::1", f"{GPU_B}::2", f"{GPU_B}::3"]
    resp = stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=available, allocation_size=1),
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=available, allocation_size=2),
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=available,
                                               must_include_deviceIDs=[f"{GPU_B}::3"], allocation_size=2),
    ]), timeout=10)
    one, two, must = [list(c.deviceIDs) for c in resp.container_responses]
    assert one == [f"{GPU_B}::1"]                        # least loaded GPU, lowest free unit
    assert sorted(two) == sorted([f"{GPU_B}::1", f"{GPU_A}::3"])  # distinct physical GPUs
    assert must == [f"{GPU_B}::3", f"{GPU_A}::3"]         # keeps must-include, then another GPU


def test_preferred_allocation_even_spread_from_idle(running):
    """Successive single-unit pods alternate between the GPUs when the kubelet follows the advice."""
    _, kubelet, _, _ = running
    stub = kubelet.stub(ENDPOINT)
    available = [f"{g}::{n}" for g in (GPU_A, GPU_B) for n in range(4)]
    picks = []
    for _ in range(6):
        resp = stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=available, allocation_size=1)]),
            timeout=10)
        dev_id = resp.container_responses[0].deviceIDs[0]
        picks.append(dev_id.split("::")[0])
        available.remove(dev_id)
    assert picks.count(GPU_A) == 3 and picks.count(GPU_B) == 3
    assert all(picks[i] != picks[i + 1] for i in range(5))


def test_pre_start_container_is_a_no_op(running):
    """GetDevicePluginOptions says it is not needed; a kubelet that calls it anyway gets an empty
    answer, and the plugin goes on serving."""
    plugin, kubelet, _, _ = running
    stub = kubelet.stub(ENDPOINT)
    assert not stub.GetDevicePluginOptions(pb.Empty(), timeout=10).pre_start_required
    resp = stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=[f"{GPU_A}::0"]), timeout=10)
    assert resp == pb.PreStartContainerResponse()
    assert plugin.proc.poll() is None
    assert stub.GetDevicePluginOptions(pb.Empty(), timeout=10) is not None


def test_kubelet_restart_reregisters(running):
    plugin, kubelet, first_req, _ = running
    pid = plugin.proc.pid
    kubelet.restart()  # deletes every socket in the directory, then serves a new kubelet.sock
    req = kubelet.wait_registration(timeout=30)
    assert (req.version, req.endpoint, req.resource_name) == (first_req.version, first_req.endpoint,
                                                              first_req.resource_name)
    assert plugin.proc.poll() is None and plugin.proc.pid == pid  # same process, never exited
    # the new kubelet watches the new server and sees the full list
    devs = kubelet.wait_update()
    assert len(devs) == 8
    # and the plugin still applies health changes through the new stream
    plugin.set_health({GPU_B: "Unhealthy"})
    kubelet.wait_update(lambda d: _health(d)[f"{GPU_B}::0"] == "Unhealthy")
    assert "serving again" in plugin.output()


def test_kubelet_socket_recreated_alone_reregisters(running):
    """Only kubelet.sock replaced (our socket left in place): the plugin still registers again."""
    plugin, kubelet, _, _ = running
    waiting = "waiting for the kubelet"
    said = plugin.output().count(waiting)
    kubelet.stop()
    # the plugin saw kubelet.sock gone before the new one appears
    poll(lambda: plugin.output().count(waiting) > said, timeout=20, interval=0.05,
         what="the plugin to notice that the kubelet went away")
    kubelet.start()
    req = kubelet.wait_registration(timeout=30)
    assert req.resource_name == "nvshare.com/gpu"
    assert plugin.proc.poll() is None


def test_rejected_registration_is_retried(short_dir, kubelet, start_plugin):
    kubelet.reject = 1
    plugin = start_plugin("--gpu-uuids", GPU_A, "--virtual-devices", "1")
    req = kubelet.wait_registration(timeout=30)
    assert len(kubelet.rejected) == 1 and req.resource_name == "nvshare.com/gpu"
    assert plugin.proc.poll() is None
    assert "registration with the kubelet failed (UNAVAILABLE: kubelet not ready (test))" in plugin.output()


def test_plugin_started_before_kubelet(short_dir, start_plugin):
    plugin = start_plugin("--gpu-uuids", GPU_A, "--virtual-devices", "2")
    sock = os.path.join(plugin.plugin_dir, ENDPOINT)
    poll(lambda: os.path.exists(sock), timeout=20, interval=0.05, what="plugin socket")
    # it looked for the kubelet, found none, and stays (rather than exiting)
    poll(lambda: "waiting for the kubelet" in plugin.output() or plugin.proc.poll() is not None,
         timeout=20, interval=0.05, what="the plugin to look for the kubelet")
    assert plugin.proc.poll() is None  # waits for the kubelet instead of exiting
    kubelet = FakeKubelet(plugin.plugin_dir).start()
    try:
        req = kubelet.wait_registration(timeout=30)
        assert req.endpoint == ENDPOINT
        assert plugin.proc.poll() is None  # the same process registered: it never exited
        devs = kubelet.wait_update()
        assert _ids(devs) == [f"{GPU_A}::0", f"{GPU_A}::1"]
    finally:
        kubelet.stop()


def test_sigterm_removes_socket_and_exits_zero(running):
    plugin, _, _, _ = running
    sock = os.path.join(plugin.plugin_dir, ENDPOINT)
    assert os.path.exists(sock)
    plugin.proc.send_signal(signal.SIGTERM)
    assert plugin.proc.wait(timeout=15) == 0
    assert not os.path.exists(sock)


def test_bad_gpu_list_exits_with_message(start_plugin):
    plugin = start_plugin("--gpu-uuids", "not-a-uuid")
    assert plugin.proc.wait(timeout=30) == 2            # a usage error, as any bad flag
    assert "--gpu-uuids" in plugin.output() and "not a GPU UUID" in plugin.output()


def test_env_configures_units(short_dir, kubelet):
    """NVSHARE_VIRTUAL_DEVICES is honoured when --virtual-devices is not given."""
    import subprocess
    import sys

    from .k8s_helpers import PKG_PARENT

    lib = os.path.join(short_dir, "lib.so")
    with open(lib, "wb") as f:
        f.write(b"x")
    env = dict(os.environ, PYTHONPATH=PKG_PARENT, NVSHARE_VIRTUAL_DEVICES="3")
    proc = subprocess.Popen([sys.executable, "-m", "xpushare.kubernetes.plugin", "--gpu-uuids", GPU_A,
                             "--device-plugin-dir", kubelet.dir, "--library", lib,
                             "--host-lib-dir", os.path.join(short_dir, "l"), "--nvml-health", "off",
                             "--watch-interval", "0.1"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        kubelet.wait_registration(timeout=30)
        assert len(kubelet.wait_update()) == 3
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_probe_answers_while_the_plugin_serves_and_fails_without_it(running, short_dir):
    """--probe (the DaemonSet's liveness and readiness probe) dials the plugin's own socket."""
    import subprocess
    import sys
    from .k8s_helpers import PKG_PARENT
    plugin, *_ = running
    cmd = [sys.executable, "-m", "xpushare.kubernetes.plugin", "--probe",
           "--device-plugin-dir", os.path.join(short_dir, "dp")]
    env = dict(os.environ, PYTHONPATH=PKG_PARENT)
    ok = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=env)
    assert ok.returncode == 0, ok.stderr
    plugin.stop()
    gone = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=env)
    assert gone.returncode == 1 and "no answer on" in gone.stderr and ENDPOINT in gone.stderr
