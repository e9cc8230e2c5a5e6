"""The DRA driver's pure parts: the devices published for GPUs (consumable capacity, slots), a
claim's allocation read into GPUs and limits (and every refusal), the CDI spec it gives, and the
state file."""

from __future__ import annotations

import json
import os

import pytest

from xpushare.kubernetes.dra import cdi, claims, inventory as inv
from xpushare.kubernetes.dra.state import PreparedClaims

from .dra_fakes import DRIVER, GIB, GPU_A, GPU_B, NODE, FakeGpu, FakeNvml, claim, gpu_config, result

GPUS = inv.discover(FakeNvml(FakeGpu(GPU_A), FakeGpu(GPU_B, memory=40 * GIB, cc=(8, 0))))
SPECS = inv.device_specs(GPUS, inv.Publishing())


def _plan(c, specs=SPECS, healthy=lambda uuid: True):
    return claims.plan(c, DRIVER, NODE, specs, healthy)


def test_discovery_reads_what_the_slice_publishes():
    a, b = GPUS
    assert (a.uuid, a.index, a.product, a.memory, a.compute_capability) == (
        GPU_A, 0, "NVIDIA H100 80GB HBM3", 80 * GIB, "9.0")
    assert (b.memory, b.compute_capability, b.minor) == (40 * GIB, "8.0", 1)


def test_consumable_devices_carry_memory_and_compute_shared_by_claims():
    (dev_a, dev_b) = inv.slice_devices(SPECS, lambda u: True)
    assert dev_a["name"] == "gpu-0" and dev_a["allowMultipleAllocations"] is True
    assert dev_a["attributes"]["uuid"] == {"string": GPU_A}
    assert dev_a["attributes"]["cudaComputeCapability"] == {"version": "9.0.0"}
    assert dev_a["capacity"]["memory"]["value"] == str(80 * GIB)
    assert dev_a["capacity"]["compute"] == {"value": "100", "requestPolicy": {
        "default": "100", "validRange": {"min": "1", "max": "100", "step": "1"}}}
    assert dev_b["capacity"]["memory"]["requestPolicy"]["default"] == str(40 * GIB)


def test_admin_memory_and_oversubscription_set_the_published_memory():
    how = inv.Publishing(gpu_memory={GPU_B: 16 * GIB, "*": 64 * GIB}, oversubscribe=1.5)
    specs = inv.device_specs(GPUS, how)
    assert (specs["gpu-0"].memory, specs["gpu-1"].memory) == (96 * GIB, 24 * GIB)


def test_slots_fallback_gives_n_unshared_devices_per_gpu_and_health_takes_a_gpu_out():
    specs = inv.device_specs(GPUS, inv.Publishing(mode=inv.SLOTS, slots=3))
    devs = inv.slice_devices(specs, lambda uuid: uuid != GPU_A)
    assert [d["name"] for d in devs] == ["gpu-1-slot-0", "gpu-1-slot-1", "gpu-1-slot-2"]
    assert all("allowMultipleAllocations" not in d and "requestPolicy" not in d["capacity"]["memory"]
               for d in devs)


def test_a_consumable_claim_gets_what_was_consumed():
    p = _plan(claim(results=[result(memory="8Gi", compute="30")], config=[gpu_config(computeShare=2)]))
    assert p.gpu_uuids == [GPU_A] and p.pods == ("pod-uid-1",)
    assert p.limits == claims.Limits(memory=8 * GIB, compute=30.0, share=2.0)
    assert [g.device for g in p.grants] == ["gpu-0"]


def test_a_whole_gpu_of_compute_is_no_compute_limit_and_two_gpus_take_the_larger_memory():
    p = _plan(claim(results=[result("gpu-0", memory="40Gi", compute="100"),
                             result("gpu-1", memory="20Gi", compute="100")]))
    assert p.gpu_uuids == [GPU_A, GPU_B]
    assert p.limits == claims.Limits(memory=40 * GIB, compute=None, share=None)


def test_parameters_lower_but_never_raise_what_was_consumed():
    p = _plan(claim(results=[result(memory="8Gi", compute="30")],
                    config=[gpu_config(memoryLimit="4Gi", computeLimit=50)]))
    assert (p.limits.memory, p.limits.compute) == (4 * GIB, 30.0)


def test_slot_claims_take_their_limits_from_parameters():
    specs = inv.device_specs(GPUS, inv.Publishing(mode=inv.SLOTS, slots=2))
    p = _plan(claim(results=[result("gpu-0-slot-1")], config=[gpu_config(memoryLimit="8Gi", computeLimit=30)]),
              specs)
    assert p.limits == claims.Limits(memory=8 * GIB, compute=30.0)
    bare = _plan(claim(results=[result("gpu-0-slot-0")]), specs)
    assert bare.limits == claims.Limits(memory=80 * GIB)


@pytest.mark.parametrize("c, error", [
    (claim(results=[result(device="gpu-7")]), "unknown device 'gpu-7'"),
    (claim(results=[result(memory="81Gi")]), "more than its capacity"),
    (claim(results=[result(compute="101")]), "compute must be from 1 to 100"),
    (claim(results=[result(driver="gpu.nvidia.com")]), "no devices of driver gpu.nvshare.com"),
    (claim(results=[result(pool="node-b")]), "not this node's"),
    (claim(results=[result()], config=[gpu_config(computeShare=0)]), "computeShare"),
    (claim(results=[result()], config=[gpu_config(memory="1Gi")]), "unknown GpuConfig field(s) memory"),
    (claim(results=[result(memory="lots")]), "is not a quantity"),
    ({"metadata": {"name": "x", "namespace": "d", "uid": "u"}, "status": {}}, "is not allocated"),
])
def test_bad_claims_are_refused_with_a_clear_reason(c, error):
    with pytest.raises(claims.ClaimError, match=None) as e:
        _plan(c)
    assert error in str(e.value)


def test_a_claim_on_an_unhealthy_gpu_is_refused():
    with pytest.raises(claims.ClaimError, match="unhealthy"):
        _plan(claim(results=[result()]), healthy=lambda uuid: uuid != GPU_A)


def test_the_cdi_spec_injects_the_library_the_socket_the_gpu_and_the_limits(tmp_path):
    p = _plan(claim(results=[result(memory="8Gi", compute="30")], config=[gpu_config(computeShare=2)]))
    how = cdi.Injection(extra_env={"NVSHARE_DEBUG": "1"})
    path = cdi.write(str(tmp_path), p, how)
    spec = json.loads(open(path).read())
    assert spec["kind"] == "gpu.nvshare.com/claim" and spec["cdiVersion"] == "0.6.0"
    (dev,) = spec["devices"]
    assert cdi.device_id(p.uid) == f"gpu.nvshare.com/claim={dev['name']}"
    env = dict(e.split("=", 1) for e in dev["containerEdits"]["env"])
    assert env == {"LD_PRELOAD": "/usr/local/nvshare/lib/libnvshare.so", "NVIDIA_VISIBLE_DEVICES": GPU_A,
                   "NVSHARE_SOCK_PATH": "/var/run/nvshare/scheduler.sock",
                   "NVSHARE_GPU_MEMORY_LIMIT": str(8 * GIB), "NVSHARE_COMPUTE_LIMIT": "30",
                   "NVSHARE_COMPUTE_SHARE": "2", "NVSHARE_DEBUG": "1"}
    mounts = {m["containerPath"]: m for m in dev["containerEdits"]["mounts"]}
    assert mounts["/usr/local/nvshare/lib"]["hostPath"] == "/var/lib/nvshare/lib"
    assert "ro" in mounts["/var/run/nvshare"]["options"]
    assert os.listdir(tmp_path) == [os.path.basename(path)]          # no temporary file left
    assert cdi.remove(str(tmp_path), p.uid) and not cdi.remove(str(tmp_path), p.uid)


def test_the_state_file_survives_a_restart_and_a_failed_write_changes_nothing(tmp_path, monkeypatch):
    p = _plan(claim(results=[result(memory="8Gi", compute="30")]))
    state = PreparedClaims(str(tmp_path))
    state.put(p)
    assert PreparedClaims(str(tmp_path)).get(p.uid) == p
    q = _plan(claim(name="other", uid="0b1e5a7c-0000-4000-8000-000000000002", results=[result()]))

    def broken(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr("xpushare.kubernetes.dra.state.write_atomic", broken)
    with pytest.raises(OSError):
        state.put(q)
    assert set(state.claims) == {p.uid}
    assert set(PreparedClaims(str(tmp_path)).claims) == {p.uid}


def test_a_damaged_state_file_keeps_what_can_be_read_and_is_set_aside(tmp_path, caplog):
    p = _plan(claim(results=[result(memory="8Gi", compute="30")]))
    PreparedClaims(str(tmp_path)).put(p)
    path = tmp_path / "prepared.json"
    data = json.loads(path.read_text())
    data["claims"]["../../escape"] = data["claims"][p.uid]                     # not a UID
    data["claims"]["0b1e5a7c-0000-4000-8000-0000000000dd"] = {"namespace": 7}   # not a record
    path.write_text(json.dumps(data))
    with caplog.at_level("ERROR", logger="nvshare-dra-plugin"):
        state = PreparedClaims(str(tmp_path))
    assert state.claims == {p.uid: p}
    (aside,) = [f for f in os.listdir(tmp_path) if f.startswith("prepared.json.damaged-")]
    assert json.loads((tmp_path / aside).read_text()) == data                 # kept for a human
    assert set(json.loads(path.read_text())["claims"]) == {p.uid}              # a good file again
    (line,) = [r.getMessage() for r in caplog.records]
    assert "damaged" in line and "'../../escape'" in line and "Kept 1 prepared claims" in line
    assert aside in line


@pytest.mark.parametrize("text", [b'{"version": 1, "claims": {"0b1e', b"\xff\xfe", b"[]", b""])
def test_a_state_file_that_is_not_ours_at_all_is_set_aside_and_the_plugin_starts_empty(tmp_path, text):
    (tmp_path / "prepared.json").write_bytes(text)
    state = PreparedClaims(str(tmp_path))
    assert state.claims == {}
    assert [f for f in os.listdir(tmp_path) if f.startswith("prepared.json.damaged-")]
    assert json.loads((tmp_path / "prepared.json").read_text())["claims"] == {}


@pytest.mark.parametrize("uid", ["../../etc/x", "a/b", "", "x" * 65, "a\nb"])
def test_a_spec_path_cannot_leave_the_cdi_directory(tmp_path, uid):
    with pytest.raises(ValueError):
        cdi.spec_path(str(tmp_path), uid)
    with pytest.raises(claims.ClaimError, match="claim UID"):
        claims.check_uid(uid)


@pytest.mark.parametrize("namespace, name", [("..", "x"), ("ns", "a/b"), ("NS", "x"), ("ns", "")])
def test_claim_names_are_held_to_what_kubernetes_allows(namespace, name):
    with pytest.raises(claims.ClaimError, match="ResourceClaim"):
        claims.check_ref(namespace, name, "0b1e5a7c-0000-4000-8000-000000000001")
