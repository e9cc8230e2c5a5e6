"""nvshare-dra-plugin end to end on one node, without a cluster: the plugin's own objects (built from
its flags) serve real gRPC on Unix sockets; a fake kubelet registers it through the registration
socket and calls NodePrepareResources / NodeUnprepareResources (v1 and v1beta1); a fake API server
holds the ResourceClaims and receives the ResourceSlice (through the official kubernetes client); a
real nvshare-scheduler is told the claims' limits."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from testkit.scheduler import SchedulerProcess
from testkit.waiting import poll

from .dra_fakes import (DRIVER, GIB, GPU_A, GPU_B, NODE, DraNode, FakeDraKubelet, FakeGpu, FakeNvml,
                        FakeResourceApi, claim, gpu_config, result)
from .k8s_helpers import PKG_PARENT

pytestmark = pytest.mark.timeout(60)
NVML = FakeNvml(FakeGpu(GPU_A), FakeGpu(GPU_B, memory=40 * GIB))


@pytest.fixture
def api():
    pytest.importorskip("kubernetes")
    a = FakeResourceApi()
    yield a
    a.stop()


@pytest.fixture
def node(short_dir, api):
    nodes = []

    def start(*flags, health_sources=()):
        n = DraNode(short_dir, api, NVML, *flags).start(health_sources)
        nodes.append(n)
        return n
    yield start
    for n in nodes:
        n.stop()


@pytest.fixture
def kubelet(node):
    made = []

    def make(n, prefer=("v1.DRAPlugin", "v1beta1.DRAPlugin")):
        k = FakeDraKubelet(n.registry, prefer)
        k.register()
        made.append(k)
        return k
    yield make
    for k in made:
        k.close()


def _scheduler(n) -> SchedulerProcess:
    env = dict(os.environ, PYTHONPATH=PKG_PARENT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return SchedulerProcess(n.scheduler_socket, ["--no-nvml"], env=env).start()


def test_registration_offers_v1_and_v1beta1_and_publishes_the_slice(node, kubelet, api):
    n = node()
    k = kubelet(n)
    assert k.info.type == "DRAPlugin" and k.info.name == DRIVER
    assert list(k.info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert k.info.endpoint == os.path.join(n.root, "plugins", DRIVER, "dra.sock")
    poll(lambda: api.slice_devices() == ["gpu-0", "gpu-1"], 10, what="the slice")
    (s,) = api.slices.values()
    assert s["spec"]["nodeName"] == NODE and s["spec"]["pool"]["name"] == NODE
    assert s["spec"]["devices"][1]["capacity"]["memory"]["value"] == "40Gi"


@pytest.mark.parametrize("version", ["v1.DRAPlugin", "v1beta1.DRAPlugin"])
def test_prepare_writes_the_cdi_spec_tells_the_scheduler_and_unprepare_undoes_it(node, kubelet, api, version):
    n = node()
    sched = _scheduler(n)
    try:
        k = kubelet(n, prefer=(version,))
        assert k.version == version
        c = claim(results=[result(memory="8Gi", compute="30")], config=[gpu_config(computeShare=2)])
        api.add_claim(c)
        uid = c["metadata"]["uid"]
        resp = k.prepare(c)
        entry = resp.claims[uid]
        assert entry.error == ""
        (d,) = entry.devices
        assert (list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids)) == (
            ["gpu"], NODE, "gpu-0", [f"gpu.nvshare.com/claim={uid}"])
        env = n.cdi_env(uid)
        assert (env["NVSHARE_GPU_MEMORY_LIMIT"], env["NVSHARE_COMPUTE_LIMIT"], env["NVSHARE_COMPUTE_SHARE"],
                env["NVIDIA_VISIBLE_DEVICES"]) == (str(8 * GIB), "30", "2", GPU_A)
        again = k.prepare(c)                                   # idempotent: same answer, one spec
        assert again.claims[uid] == entry and len(n.cdi_files()) == 1
        # the scheduler holds the claim's limits for its pod: clearing finds exactly that one pod
        assert k.unprepare(c).claims[uid].error == ""
        assert n.cdi_files() == [] and n.driver.state.claims == {}
        assert sched.ctl("clear_claim", claim=uid) == {"ok": True, "pods": 0}   # unprepare cleared it
        assert k.unprepare(c).claims[uid].error == ""          # idempotent
        assert "set_claim" in sched.log() and "clear_claim" in sched.log()
    finally:
        sched.stop()


def test_a_two_gpu_claim_is_one_cdi_device_given_once(node, kubelet, api):
    n = node()
    c = claim(results=[result("gpu-0", request="gpus", memory="20Gi", compute="50"),
                       result("gpu-1", request="gpus", memory="20Gi", compute="50")])
    api.add_claim(c)
    uid = c["metadata"]["uid"]
    devices = kubelet(n).prepare(c).claims[uid].devices
    assert [(d.device_name, list(d.cdi_device_ids)) for d in devices] == [
        ("gpu-0", [f"gpu.nvshare.com/claim={uid}"]), ("gpu-1", [])]
    env = n.cdi_env(uid)
    assert env["NVIDIA_VISIBLE_DEVICES"] == f"{GPU_A},{GPU_B}" and env["NVSHARE_COMPUTE_LIMIT"] == "50"


def test_the_scheduler_is_told_again_after_it_restarts(node, kubelet, api):
    n = node("--resync-interval", "0.2")
    c = claim(results=[result(memory="8Gi", compute="30")])
    api.add_claim(c)
    k = kubelet(n)
    assert k.prepare(c).claims[c["metadata"]["uid"]].error == ""     # no scheduler yet: still prepared
    sched = _scheduler(n)
    try:
        poll(lambda: "claim %s" % c["metadata"]["uid"] in sched.log(), 10, what="set_claim after resync")
        assert sched.ctl("clear_claim", claim=c["metadata"]["uid"]) == {"ok": True, "pods": 1}
    finally:
        sched.stop()


@pytest.mark.parametrize("bad, error", [
    (claim(uid="0b1e5a7c-0000-4000-8000-0000000000b1", results=[result(device="gpu-9")]), "unknown device"),
    (claim(uid="0b1e5a7c-0000-4000-8000-0000000000b2", results=[result(memory="41Gi", device="gpu-1")]),
     "more than its capacity"),
    (claim(uid="0b1e5a7c-0000-4000-8000-0000000000b3", results=[result(driver="gpu.nvidia.com")]),
     "no devices of driver gpu.nvshare.com"),
])
def test_bad_claims_get_a_clear_error_and_nothing_on_disk(node, kubelet, api, bad, error):
    n = node()
    k = kubelet(n)
    good = claim(name="ok", results=[result()])
    api.add_claim(bad)
    api.add_claim(good)
    resp = k.prepare(bad, good)                        # one bad claim does not fail the others
    assert error in resp.claims[bad["metadata"]["uid"]].error
    assert resp.claims[bad["metadata"]["uid"]].error.startswith("gpu.nvshare.com: ")
    assert resp.claims[good["metadata"]["uid"]].error == ""
    assert n.cdi_files() == [f"gpu.nvshare.com-claim_{good['metadata']['uid']}.json"]
    assert set(n.driver.state.claims) == {good["metadata"]["uid"]}
    assert sorted(os.listdir(n.state_dir)) == ["prepared.json"]       # no temporary files left


def test_an_unknown_or_replaced_claim_is_refused(node, kubelet, api):
    n = node()
    k = kubelet(n)
    missing = claim(name="gone", results=[result()])
    assert "404" in k.prepare(missing).claims[missing["metadata"]["uid"]].error
    replaced = claim(name="nb", results=[result()])
    api.add_claim(dict(replaced, metadata=dict(replaced["metadata"], uid="0b1e5a7c-0000-4000-8000-0000000000ff")))
    assert "deleted and created again" in k.prepare(replaced).claims[replaced["metadata"]["uid"]].error
    assert n.cdi_files() == []


def test_a_restarted_plugin_answers_from_its_state_and_restores_a_lost_spec(short_dir, api, node, kubelet):
    n = node()
    c = claim(results=[result(memory="8Gi", compute="30")])
    api.add_claim(c)
    first = kubelet(n).prepare(c).claims[c["metadata"]["uid"]]
    n.stop()
    os.unlink(os.path.join(n.cdi_dir, n.cdi_files()[0]))       # e.g. /var/run is a tmpfs: lost on reboot
    api.claims.clear()                                          # the answer must come from the state file
    n2 = node()
    again = kubelet(n2).prepare(c).claims[c["metadata"]["uid"]]
    assert again == first and n2.cdi_env(c["metadata"]["uid"])["NVSHARE_COMPUTE_LIMIT"] == "30"
    kubelet(n2).unprepare(c)
    assert n2.cdi_files() == []


def test_an_unhealthy_gpu_leaves_the_slice_and_comes_back(node, kubelet, api, tmp_path):
    from xpushare.kubernetes.health import FileHealthSource
    health = tmp_path / "health.json"
    source = FileHealthSource(str(health), [GPU_A, GPU_B], interval=0.05)
    n = node(health_sources=[source])
    kubelet(n)
    poll(lambda: api.slice_devices() == ["gpu-0", "gpu-1"], 10, what="the slice")
    gen = api.slices[f"{NODE}-{DRIVER}"]["spec"]["pool"]["generation"]
    health.write_text(json.dumps({GPU_B: "Unhealthy"}))
    poll(lambda: api.slice_devices() == ["gpu-0"], 10, what="gpu-1 out of the slice")
    assert api.slices[f"{NODE}-{DRIVER}"]["spec"]["pool"]["generation"] == gen + 1
    health.write_text("{}")
    poll(lambda: api.slice_devices() == ["gpu-0", "gpu-1"], 10, what="gpu-1 back")


def test_an_unchanged_slice_is_not_written_again(node, api):
    """The periodic check reads the slice back (its quantities in the API server's canonical form)
    and writes nothing when it says the same."""
    node("--resync-interval", "0.1")
    poll(lambda: api.slice_devices() == ["gpu-0", "gpu-1"], 10, what="the slice")
    assert api.slices[f"{NODE}-{DRIVER}"]["spec"]["devices"][0]["capacity"]["memory"]["value"] == "80Gi"
    poll(lambda: sum(m == "GET" for m, _ in api.requests) >= 4, 10, what="a few checks")
    assert [m for m, _ in api.requests if m in ("POST", "PUT")] == ["POST"]


def test_a_deleted_slice_is_published_again(node, kubelet, api):
    """The kubelet deletes a driver's slices when its plugin stays unregistered for a while: a new
    registration (and the periodic check) publishes it again."""
    n = node("--resync-interval", "0.3")
    poll(lambda: api.slice_devices() == ["gpu-0", "gpu-1"], 10, what="the slice")
    api.slices.clear()
    kubelet(n)
    poll(lambda: api.slice_devices() == ["gpu-0", "gpu-1"], 10, what="the slice again")


def test_the_slice_is_published_once_the_api_server_answers(node, api):
    api.fail_next = 3
    node()
    poll(lambda: api.slice_devices() == ["gpu-0", "gpu-1"], 10, what="the slice after failures")


def test_slots_mode_publishes_n_devices_per_gpu(node, api):
    node("--sharing", "slots", "--slots", "2")
    poll(lambda: api.slice_devices() == ["gpu-0-slot-0", "gpu-0-slot-1", "gpu-1-slot-0", "gpu-1-slot-1"], 10,
         what="slot devices")


def test_probe_answers_while_the_plugin_serves(node, kubelet):
    from xpushare.kubernetes.dra.main import main
    n = node()
    kubelet(n)
    flags = ["--probe", "--kubelet-plugins-dir", n.args.kubelet_plugins_dir]
    assert main(flags) == 0
    n.stop()
    assert main(flags) == 1


def test_dry_run_prints_the_slice_without_a_cluster(capsys):
    from xpushare.kubernetes.dra.main import main
    assert main(["--dry-run", "--node-name", "n1", "--gpu-memory", "64GiB", "--oversubscribe", "2"],
                nvml=NVML) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["kind"] == "ResourceSlice" and s["spec"]["nodeName"] == "n1"
    assert [d["attributes"]["uuid"]["string"] for d in s["spec"]["devices"]] == [GPU_A, GPU_B]
    assert s["spec"]["devices"][0]["capacity"]["memory"]["value"] == str(128 * GIB)


def test_the_command_without_nvml_says_so():
    """The console script's module runs; without a GPU driver it exits 1 naming NVML."""
    r = subprocess.run([sys.executable, "-m", "xpushare.kubernetes.dra.main", "--dry-run"],
                       capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, PYTHONPATH=PKG_PARENT, LD_LIBRARY_PATH="/nonexistent"))
    if r.returncode == 0:
        pytest.skip("NVML works on this machine (a GPU machine): see tests/gpu/test_dra_plugin.py")
    assert r.returncode == 1 and "NVML" in r.stderr, r.stderr


def test_dry_run_runs_without_a_gpu_on_declared_gpus():
    """--gpu-uuids: no NVML asked; each GPU's memory is --gpu-memory's, and what only NVML knows
    (product, compute capability, the card's memory) is left out rather than made up."""
    run = [sys.executable, "-m", "xpushare.kubernetes.dra.main", "--dry-run", "--node-name", "n1",
           "--gpu-uuids", f"{GPU_A},{GPU_B}"]
    env = dict(os.environ, PYTHONPATH=PKG_PARENT, LD_LIBRARY_PATH="/nonexistent")
    r = subprocess.run([*run, "--gpu-memory", "40GiB", "--gpu-memory", f"{GPU_B}=16GiB"],
                       capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0, r.stderr
    devices = json.loads(r.stdout)["spec"]["devices"]
    assert [(d["attributes"]["uuid"]["string"], d["capacity"]["memory"]["value"]) for d in devices] == [
        (GPU_A, str(40 * GIB)), (GPU_B, str(16 * GIB))]
    assert set(devices[0]["attributes"]) == {"uuid", "index", "sharing"}
    r = subprocess.run([*run, "--gpu-memory", f"{GPU_B}=16GiB"], capture_output=True, text=True,
                       timeout=30, env=env)
    assert r.returncode == 2 and f"GPU {GPU_A} has no memory" in r.stderr, r.stderr


def test_claim_uids_that_would_leave_the_cdi_directory_are_refused(node, kubelet, api):
    """The kubelet's UID names the spec file: one that is no UID is refused, and no file outside
    the CDI directory is written or removed."""
    n = node()
    k = kubelet(n)
    os.makedirs(os.path.join(n.cdi_dir, "gpu.nvshare.com-claim_x"))
    victim = os.path.join(n.root, "victim.json")
    open(victim, "w").close()
    bad = claim(uid="x/../../victim", results=[result(memory="8Gi", compute="30")])
    api.add_claim(bad)
    entry = k.prepare(bad).claims["x/../../victim"]
    assert "invalid claim UID" in entry.error and entry.devices == []
    assert "invalid claim UID" in k.unprepare(bad).claims["x/../../victim"].error
    assert os.path.exists(victim) and n.cdi_files() == ["gpu.nvshare.com-claim_x"]
    assert n.driver.state.claims == {}


def test_prepare_returns_the_allocations_share_id_to_v1_kubelets_and_keeps_it_across_a_restart(
        short_dir, api, node, kubelet):
    c = claim(results=[result(memory="8Gi", compute="30")])    # the allocator's shareID with it
    share = c["status"]["allocation"]["devices"]["results"][0]["shareID"]
    api.add_claim(c)
    uid = c["metadata"]["uid"]
    n = node()
    (d,) = kubelet(n, prefer=("v1.DRAPlugin",)).prepare(c).claims[uid].devices
    assert d.HasField("share_id") and d.share_id == share
    (old,) = kubelet(n, prefer=("v1beta1.DRAPlugin",)).prepare(c).claims[uid].devices
    assert old.device_name == "gpu-0"                          # v1beta1's Device has no share ID
    n.stop()
    again = node()                                             # from the state file
    (d,) = kubelet(again, prefer=("v1.DRAPlugin",)).prepare(c).claims[uid].devices
    assert d.share_id == share
    slot = claim(uid="0b1e5a7c-0000-4000-8000-0000000000c1", results=[result("gpu-1")])
    api.add_claim(slot)
    (d,) = kubelet(again, prefer=("v1.DRAPlugin",)).prepare(slot).claims[slot["metadata"]["uid"]].devices
    assert not d.HasField("share_id")                          # no shareID, none sent


def test_dry_run_runs_against_the_mock_nvml(tmp_path):
    """The console script's real discovery (pynvml) against tests/mock/mock_nvml.c: every call it
    makes is there."""
    import shutil
    from .k8s_helpers import REPO
    if shutil.which("gcc") is None:
        pytest.skip("no gcc to build the mock NVML")
    lib = tmp_path / "libnvidia-ml.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(lib),
                    "-Wl,-soname,libnvidia-ml.so.1", str(REPO / "tests" / "mock" / "mock_nvml.c")], check=True)
    r = subprocess.run([sys.executable, "-m", "xpushare.kubernetes.dra.main", "--dry-run", "--node-name", "n1"],
                       capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, PYTHONPATH=PKG_PARENT, LD_LIBRARY_PATH=str(tmp_path),
                                MOCK_NVML_DEVICES="2", MOCK_NVML_TOTAL_MEM="16G"))
    assert r.returncode == 0, r.stderr
    devices = json.loads(r.stdout)["spec"]["devices"]
    assert [(d["name"], d["attributes"]["uuid"]["string"], d["attributes"]["productName"]["string"],
             d["attributes"]["cudaComputeCapability"]["version"], d["capacity"]["memory"]["value"])
            for d in devices] == [
        ("gpu-0", "GPU-00000000-0000-0000-0000-000000000000", "Mock GPU 0", "9.0.0", str(16 * GIB)),
        ("gpu-1", "GPU-00000000-0000-0000-0000-000000000001", "Mock GPU 1", "9.0.0", str(16 * GIB))]


@pytest.mark.parametrize("version, flags, published, warned", [
    ("v1.34.2", (), ["gpu-0-slot-0", "gpu-0-slot-1", "gpu-1-slot-0", "gpu-1-slot-1"], "publishing slots"),
    ("v1.34.2", ("--sharing", "consumable"), ["gpu-0", "gpu-1"], "as --sharing=consumable says"),
    ("v1.35.0", (), ["gpu-0", "gpu-1"], None),
])
def test_on_kubernetes_1_34_a_node_of_several_gpus_publishes_slots_unless_told_otherwise(
        node, api, caplog, version, flags, published, warned):
    api.version = version
    with caplog.at_level("WARNING", logger="nvshare-dra-plugin"):
        node("--slots", "2", *flags)
    poll(lambda: api.slice_devices() == published, 10, what=f"the slice: {published}")
    lines = [r.getMessage() for r in caplog.records if "allocator" in r.getMessage()]
    if warned is None:
        assert lines == []
    else:
        (line,) = lines
        assert "Kubernetes 1.34" in line and "2 GPUs" in line and warned in line


def test_one_gpu_on_kubernetes_1_34_stays_consumable(short_dir, api):
    from .dra_fakes import DraNode
    api.version = "v1.34.0"
    n = DraNode(short_dir, api, FakeNvml(FakeGpu(GPU_A))).start()
    try:
        poll(lambda: api.slice_devices() == ["gpu-0"], 10, what="the slice")
        assert ("GET", "/version/") not in api.requests                # not asked: it decides nothing
    finally:
        n.stop()
