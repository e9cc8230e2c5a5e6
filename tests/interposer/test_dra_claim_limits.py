"""A DRA claim's limits reach the process: nvshare-dra-plugin prepares a claim of 8 GiB and 30% of
the GPU (through the fake kubelet's gRPC call, the claim read from the fake API server), and a
process started with exactly the environment of the CDI spec it wrote, on the mock driver, is
refused allocations past 8 GiB and held to 30% of the GPU's time.

The CDI spec's container paths are made the host's for this: the library directory is the build's
and the socket directory the test's, as the runtime's bind mounts would make them."""

from __future__ import annotations

import os

import pytest

from .harness import uuid_of
from .test_alloc import OOM, _allocs
from .test_quota import TOLERANCE, _saturate

pytest.importorskip("grpc")
pytest.importorskip("kubernetes")

from ..kubernetes.dra_fakes import FakeGpu, FakeNvml, claim, prepared_claim_env, result  # noqa: E402

MOCK_GPU_MEMORY = 16 << 30   # the mock driver's device


@pytest.fixture
def claim_env(world, nvshare_lib):
    """The environment of the CDI spec of a prepared claim of 8 GiB and 30%."""
    lib_dir = os.path.dirname(str(nvshare_lib))
    assert os.path.basename(str(nvshare_lib)) == "libnvshare.so"
    world.socket = world.dir / "scheduler.sock"       # the name the spec's NVSHARE_SOCK_PATH uses
    env = prepared_claim_env(str(world.dir / "dra"), FakeNvml(FakeGpu(uuid_of(0), memory=MOCK_GPU_MEMORY)),
                             lib_dir, str(world.dir), claim(results=[result(memory="8Gi", compute="30")]))
    assert env["NVSHARE_GPU_MEMORY_LIMIT"] == str(8 << 30) and env["NVSHARE_COMPUTE_LIMIT"] == "30"
    assert env["LD_PRELOAD"] == str(nvshare_lib) and env["NVSHARE_SOCK_PATH"] == str(world.socket)
    return env


def test_the_claims_memory_limit_refuses_allocations_past_8_gib(world, claim_env):
    world.scheduler(mode="off")
    app = world.run("init", "ctx", 0, "alloc", "6G", "alloc", "3G", "alloc", "2G", env=claim_env)
    assert _allocs(app) == [0, OOM, 0]          # 6 + 3 > 8 GiB; 6 + 2 fits


def test_the_claims_compute_limit_holds_the_process_to_30_percent(world, claim_env):
    world.scheduler(mode="auto")
    got, _ = _saturate(world, claim_env["NVSHARE_COMPUTE_LIMIT"], 1.6, env=claim_env)
    assert got == pytest.approx(0.30, abs=TOLERANCE)
