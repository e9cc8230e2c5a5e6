"""The pinner thread asked during an eviction (swaphost.c): a managed range whose first swap-out
comes while another range's swap-store copy still runs is left to the driver's prefetch and
gets its host copy from the pinner after the eviction (the eviction stops the pinner, and asks it
again when it is done)."""

from __future__ import annotations

import pytest

from xpushare.wire.protocol import FEATURE_SWAP

from .harness import poll
from .swap_steps import drop, idle_env, pins

pytestmark = pytest.mark.managed_backing
MIB = 1 << 20


def test_a_range_left_to_the_prefetch_during_an_eviction_gets_its_copy_after_it(world, recorder):
    recorder.welcome_features = FEATURE_SWAP
    # kernels of 0.4 s: the first range's copy is still running when the second is planned
    app = world.app("init", "ctx", 0, "alloc", "1M", "fill", 1, "launch", 1, "pause",
                    "alloc", "1M", "launch", 1, "pause", "launch", 1,
                    env=idle_env(MOCK_CUDA_KERNEL_US=400_000))
    app.paused()
    drop(recorder, 1)
    poll(lambda: len([e for e in pins(world.log, app) if e["size"] == MIB]) >= 1, 15,
         what="the first range's host copy")
    app.resume()
    app.paused(nth=2)
    drop(recorder, 2)
    poll(lambda: len([e for e in pins(world.log, app) if e["size"] == MIB]) >= 2, 15,
         what="the second range's host copy, made after the eviction")
    app.resume()
    assert app.finish() == 0
