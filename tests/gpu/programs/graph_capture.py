"""CUDA graph capture and replay with PyTorch, compared with eager execution.

Scenarios (each reported separately; a failing one does not stop the others):
- basic: capture matmul + elementwise ops + reductions (the graph's memory comes from allocations made
  during capture), replay with new inputs, compare with eager results;
- many_kernels: a capture of several hundred kernels, more than the library's in-flight checkpoint
  interval, so any checkpoint logic meets a capturing stream;
- idle_during_capture: the capture pauses for longer than NVSHARE_IDLE_RELEASE_MS, so the library's
  idle release (a drain of the device) happens while the stream is capturing in global mode.
This is where the prior nvshare failed: cudaErrorStreamCaptureUnsupported, then ...Invalidated.
"""

from __future__ import annotations

import argparse
import time
import traceback
from collections.abc import Callable

import torch
from progutil import emit, library_loaded, mark

DEV = torch.device("cuda")


def compare(outs: tuple[torch.Tensor, ...], refs: tuple[torch.Tensor, ...]) -> tuple[float, bool]:
    err = max(float((o.double() - r.double()).abs().max()) for o, r in zip(outs, refs, strict=True))
    exact = all(torch.equal(o, r) for o, r in zip(outs, refs, strict=True))
    return err, exact


def capture_and_replay(name: str, x: torch.Tensor, eager: Callable[[torch.Tensor], tuple],
                       replays: int, seed: int, captured: Callable[[torch.Tensor], tuple] | None = None
                       ) -> dict:
    """Warm up, capture `captured` (default: `eager`) on static input x, then replay with new inputs
    and compare every replay's outputs with `eager` run on the same input."""
    side = torch.cuda.Stream()  # warm-up on a side stream first, as PyTorch asks before a capture
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            eager(x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # capture_error_mode="global", the default and the strictest
        outs = (captured or eager)(x)

    gen = torch.Generator().manual_seed(seed)
    worst, all_exact = 0.0, True
    for _ in range(replays):
        new = torch.randn(x.shape, generator=gen).to(DEV)
        x.copy_(new)
        graph.replay()
        refs = eager(new)
        torch.cuda.synchronize()
        err, exact = compare(outs, refs)
        worst, all_exact = max(worst, err), all_exact and exact
    return {"name": name, "ok": worst <= 1e-4, "replays": replays, "max_abs_err": worst,
            "bit_exact": all_exact}


def basic(replays: int) -> dict:
    torch.manual_seed(0)
    w = torch.randn(256, 256, device=DEV) / 16

    def fn(inp: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = torch.relu(inp @ w) * 2 + 1
        return y.sum(dim=1), y.amax(dim=0), torch.softmax(y, dim=1)

    return capture_and_replay("basic", torch.randn(64, 256, device=DEV), fn, replays, seed=1)


def many_kernels(replays: int, iterations: int) -> dict:
    def fn(inp: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = inp
        for _ in range(iterations):
            y = y * 0.999 + 0.001  # two kernels per iteration
        return (y,)

    result = capture_and_replay("many_kernels", torch.randn(4096, device=DEV), fn, replays, seed=2)
    result["kernels_captured"] = 2 * iterations
    return result


def idle_during_capture(replays: int, pause_s: float) -> dict:
    torch.manual_seed(3)
    w = torch.randn(128, 128, device=DEV) / 12

    def first(inp: torch.Tensor) -> torch.Tensor:
        return torch.tanh(inp @ w)

    def second(y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (y @ w.t()).sum(dim=0), y.abs().amax()

    def with_pause(inp: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = first(inp)
        mark("capture pause begin")
        time.sleep(pause_s)  # no GPU calls: the library may release the device meanwhile
        mark("capture pause end")
        return second(y)

    result = capture_and_replay("idle_during_capture", torch.randn(32, 128, device=DEV),
                                lambda inp: second(first(inp)), replays, seed=4, captured=with_pause)
    result["pause_s"] = pause_s
    return result


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--replays", type=int, default=20)
    p.add_argument("--iterations", type=int, default=300)
    p.add_argument("--pause-s", type=float, default=0.5)
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.zeros(1, device=DEV)
    scenarios = [("basic", lambda: basic(args.replays)),
                 ("many_kernels", lambda: many_kernels(args.replays, args.iterations)),
                 ("idle_during_capture", lambda: idle_during_capture(args.replays, args.pause_s))]
    results = []
    for name, scenario in scenarios:
        try:
            results.append(scenario())
        except Exception as e:  # report and go on: one broken capture must not hide the others
            results.append({"name": name, "ok": False, "error": f"{type(e).__name__}: {e}",
                            "traceback": traceback.format_exc()[-2000:]})
            try:
                torch.cuda.synchronize()
            except Exception:  # the context may be broken now; the next scenarios will say so
                pass
    emit({"scenarios": results, "library_loaded": library_loaded(),
          "memory_total": torch.cuda.mem_get_info()[1]})


if __name__ == "__main__":
    main()
