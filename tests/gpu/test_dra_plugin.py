"""nvshare-dra-plugin on a real GPU: NVML discovery publishes the card's UUID and memory (the
--dry-run slice), and a process started under nvshare-run with exactly the environment of the CDI
spec the plugin writes for a claim of 2 GiB and 30% is held to that memory and that compute.

The claim is prepared the way the kubelet asks for it (the fake kubelet's gRPC call to the plugin,
the claim read from a fake API server: tests/kubernetes/dra_fakes.py), with the GPUs from real NVML.

GPU safety: every process gets the 16 GiB virtual capacity (nvshare-run --gpu-memory); the memory
check holds 1 GiB and asks for 1.5 GiB more, which the library refuses at the claim's 2 GiB without
asking the driver; the compute check's workload holds three 128 MiB vectors.

    python -m pytest tests/gpu/test_dra_plugin.py -v -s
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from testkit import gpu as harness
from testkit.gpu import GIB, PROGRAMS, VIRTUAL_CAPACITY, python_cmd

pytest.importorskip("grpc")
pytest.importorskip("kubernetes")
pynvml = pytest.importorskip("pynvml")

from tests.kubernetes.dra_fakes import claim, prepared_claim_env, result  # noqa: E402

WORKLOAD = harness.REPO / "bench" / "quotas" / "quota_workload.py"
LIMIT_PCT = 30
TOLERANCE = 0.05   # of the solo throughput: bandwidth-bound sums run at the same clock at any limit


def _nvshare_run() -> list[str]:
    found = shutil.which("nvshare-run")
    return [found] if found else [sys.executable, "-m", "xpushare.cli.run"]


@pytest.mark.timeout(60)
def test_dry_run_publishes_the_real_gpus() -> None:
    r = subprocess.run([sys.executable, "-m", "xpushare.kubernetes.dra.main", "--dry-run", "--node-name",
                        "gpu-node"], capture_output=True, text=True, timeout=50, env=harness.native_env())
    assert r.returncode == 0, r.stderr
    print(r.stdout)
    devices = json.loads(r.stdout)["spec"]["devices"]
    pynvml.nvmlInit()
    assert len(devices) == pynvml.nvmlDeviceGetCount()
    for i, d in enumerate(devices):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        uuid = pynvml.nvmlDeviceGetUUID(h)
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        total = pynvml.nvmlDeviceGetMemoryInfo(h).total
        assert d["name"] == f"gpu-{i}" and d["attributes"]["uuid"] == {"string": uuid}
        assert d["capacity"]["memory"]["value"] == str(total) and d["attributes"]["memoryPhysical"]["int"] == total
        assert d["allowMultipleAllocations"] is True and d["capacity"]["compute"]["value"] == "100"


@pytest.fixture
def claim_env(scheduler_factory, nvshare_lib, tmp_path):
    """(scheduler, the CDI environment of a prepared claim of 2 GiB and 30% on the visible GPU)."""
    sched = scheduler_factory(mode="auto", tq=2)
    lib_dir = str(nvshare_lib.parent)
    root = harness.short_tempdir("dra-")
    c = claim(results=[result(device=f"gpu-{harness.visible_gpu_index()}", memory="2Gi",
                              compute=str(LIMIT_PCT))])
    try:
        env = prepared_claim_env(str(root), pynvml, lib_dir, str(sched.socket.parent), c)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert env["NVSHARE_GPU_MEMORY_LIMIT"] == str(2 * GIB) and env["NVSHARE_COMPUTE_LIMIT"] == str(LIMIT_PCT)
    assert env["LD_PRELOAD"] == str(nvshare_lib) and env["NVSHARE_SOCK_PATH"] == str(sched.socket)
    print("CDI environment:", env)
    return sched, env


def _under_claim(sched, env: dict, *argv) -> list[str]:
    return [*_nvshare_run(), "--no-start", "--socket", str(sched.socket), "--gpu-memory", VIRTUAL_CAPACITY,
            "--", *argv]


@pytest.mark.timeout(180)
def test_a_process_under_the_claims_environment_is_held_to_its_memory(claim_env) -> None:
    sched, env = claim_env
    argv = _under_claim(sched, env, *python_cmd(PROGRAMS / "memory_view.py", "--hold-mib", 1024,
                                                "--oversize-mib", 1536))
    shared = harness.run(argv, harness.native_env(**env), timeout=120)
    harness.check_shared(shared, timeout=120)
    view = shared.result
    print(view)
    assert view and view["library_loaded"], shared.describe()
    assert view["total_before"] == 2 * GIB, view          # the claim's memory is what it sees
    assert view["oversize"] == "OutOfMemoryError", view   # 1 GiB + 1.5 GiB > 2 GiB
    assert view["small_after_ok"], view


def _throughput(argv_prefix: list[str], env: dict, tmp, tag: str, seconds: float = 5.0) -> float:
    files = {k: tmp / f"{tag}.{k}" for k in ("warm", "go", "ready")}
    argv = [*argv_prefix, sys.executable, str(WORKLOAD), "--op", "add", "--seconds", str(seconds),
            "--warm", str(files["warm"]), "--go", str(files["go"]), "--ready", str(files["ready"])]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 180
        while not files["warm"].exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.05)
        files["go"].touch()
        out, _ = proc.communicate(timeout=60 + 10 * seconds)
        assert proc.returncode == 0, out
        return json.loads(files["ready"].read_text())["ips"]
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.timeout(420)
def test_a_process_under_the_claims_environment_is_held_to_its_compute(claim_env, tmp_path) -> None:
    """Sums of vectors (bound by memory bandwidth): their throughput is the GPU time they get. Under
    the claim's environment, 30% +/- 5 points of the same workload's solo throughput under the
    library with no limit."""
    sched, env = claim_env
    solo_env = {k: v for k, v in env.items() if k not in ("NVSHARE_COMPUTE_LIMIT", "NVSHARE_GPU_MEMORY_LIMIT")}
    solo = _throughput(_under_claim(sched, solo_env), harness.native_env(**solo_env), tmp_path, "solo")
    limited = _throughput(_under_claim(sched, env), harness.native_env(**env), tmp_path, "claim")
    ratio = limited / solo
    print(f"solo {solo:.1f}/s, under the claim {limited:.1f}/s: {ratio:.3f} of solo")
    assert ratio == pytest.approx(LIMIT_PCT / 100, abs=TOLERANCE)
