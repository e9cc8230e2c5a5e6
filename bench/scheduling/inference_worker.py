#!/usr/bin/env python3
"""The two programs of bench/scheduling/inference_beside_training.py: an inference server and a
training loop, one process each (`python3 inference_worker.py server|trainer CONFIG_JSON`).

Both build their model, warm up, create `<dir>/ready-<role>` and wait for `<dir>/start` (the
orchestrator writes a CLOCK_MONOTONIC time in it once both are ready), so that every arm starts its
measurement warm and at one moment.

- server: a fp16 transformer encoder (d_model 512, 8 heads, `layers` layers, batch 1, seq 128),
  answering `requests` requests whose arrivals are a seeded Poisson process (exponential gaps of
  mean `mean_ms`) after the start: open loop, so a late answer does not delay later arrivals. A
  request's latency runs from its arrival to the end of its synchronised forward pass; its submit
  time, from its arrival to the return of the pass's last launch. Inputs are
  a seeded pool of INPUTS tensors, request i takes input i % INPUTS; the SHA-256 of each input's
  output is reported, to be compared across arms (bit-identical answers).
- trainer: an fp32 MLP (TRAINERS: width 4096, depth 4, batch 512; "small": 256, 8, 32, launch-bound)
  trained with SGD until `<dir>/stop` exists; each step ends with a synchronize and its end time
  is reported.

`stand_in`: no torch and no GPU: the server's "forward pass" sleeps `stand_in_ms` and hashes its
input index, the trainer's step sleeps 2 ms (what the dry run and its test use).
Prints one line `RESULT {...}` (testkit.gpu.Run.result).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time

INPUTS = 16
SEQ, D_MODEL, HEADS = 128, 512, 8
# The training loop's MLP (width, depth, batch) by cfg["trainer"]: "large" keeps the GPU busy with
# kernels of a few hundred microseconds; "small" is launch-bound (kernels of microseconds, the
# host launching as fast as it can), where a tight queue bound means a checkpoint every few
# launches.
TRAINERS = {"large": (4096, 4, 512), "small": (256, 8, 32)}
WARMUP = 20


def arrivals(n: int, mean_ms: float, seed: int) -> list[float]:
    """Seconds after the start at which each request arrives: exponential gaps of mean mean_ms."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(1000.0 / mean_ms)
        out.append(t)
    return out


def _wait_start(cfg: dict, role: str) -> float:
    d = cfg["dir"]
    open(os.path.join(d, f"ready-{role}"), "w").close()
    path = os.path.join(d, "start")
    while not os.path.exists(path):
        time.sleep(0.005)
    for _ in range(200):
        text = open(path).read().strip()
        if text:
            start = float(text)
            break
        time.sleep(0.005)
    while time.monotonic() < start:
        time.sleep(min(0.005, max(0.0, start - time.monotonic())))
    return start


def _server_model(cfg: dict):
    import torch
    torch.manual_seed(cfg["seed"])
    layer = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, dim_feedforward=4 * D_MODEL,
                                             batch_first=True, dropout=0.0)
    model = torch.nn.TransformerEncoder(layer, cfg["layers"], enable_nested_tensor=False)
    model = model.half().cuda().eval()
    gen = torch.Generator().manual_seed(cfg["seed"] + 1)
    inputs = [torch.randn(1, SEQ, D_MODEL, generator=gen).half().cuda() for _ in range(INPUTS)]

    def answer(i: int) -> tuple[str, float, float]:
        cpu = time.thread_time()
        with torch.inference_mode():
            y = model(inputs[i % INPUTS])
        submitted = time.monotonic()  # every kernel of the pass launched (the gate let them by)
        cpu = time.thread_time() - cpu  # of the launches: below their wall time where they waited
        torch.cuda.synchronize()
        return hashlib.sha256(y.cpu().numpy().tobytes()).hexdigest(), submitted, cpu
    return answer


def _stand_in_server(cfg: dict):
    def answer(i: int) -> tuple[str, float, float]:
        submitted = time.monotonic()
        time.sleep(cfg["stand_in_ms"] / 1000)
        return hashlib.sha256(str(i % INPUTS).encode()).hexdigest(), submitted, 0.0
    return answer


def serve(cfg: dict) -> dict:
    answer = _stand_in_server(cfg) if cfg.get("stand_in") else _server_model(cfg)
    for i in range(WARMUP):
        answer(i)
    start = _wait_start(cfg, "server")
    hashes: dict[int, str] = {}
    latency, ends, submits, services, launch_cpu = [], [], [], [], []
    for i, at in enumerate(arrivals(cfg["requests"], cfg["mean_ms"], cfg["seed"])):
        arrival = start + at
        while (now := time.monotonic()) < arrival:
            time.sleep(min(0.0005, arrival - now) if arrival - now > 0.001 else 0)
        began = time.monotonic()  # later than the arrival where the last answer was late
        digest, submitted, cpu = answer(i)
        end = time.monotonic()
        latency.append(end - arrival)
        ends.append(end)
        submits.append(submitted - arrival)
        services.append(end - began)
        launch_cpu.append((cpu, submitted - began))
        if hashes.setdefault(i % INPUTS, digest) != digest:
            hashes[i % INPUTS] = "differs-within-run"
    # The idle gaps: from an answer to the next arrival (none when the next one came already).
    gaps = [(ends[i], start + a) for i, a in enumerate(arrivals(cfg["requests"], cfg["mean_ms"],
                                                                 cfg["seed"])[1:]) if start + a > ends[i]]
    # submit_s: arrival to the last launch's return (the CPU side, the gate's waits included); the
    # rest of a latency is the GPU finishing the pass.
    # service_s: the answer's own time, without the wait for earlier answers (open loop: a slower
    # answer delays the next ones, and the latency's tail grows faster than the service's);
    # launch_cpu_s: (CPU time, wall time) of each pass's launches.
    return {"latency_s": latency, "submit_s": submits, "service_s": services,
            "launch_cpu_s": launch_cpu,
            "hashes": {str(k): v for k, v in sorted(hashes.items())},
            "start": start, "end": ends[-1] if ends else start, "gaps": gaps}


def _trainer_step(cfg: dict):
    if cfg.get("stand_in"):
        return lambda: time.sleep(0.002)
    import torch
    torch.manual_seed(cfg["seed"])
    width, depth, batch = TRAINERS[cfg.get("trainer", "large")]
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
    return step


def train(cfg: dict) -> dict:
    step = _trainer_step(cfg)
    for _ in range(5):
        step()
    start = _wait_start(cfg, "trainer")
    stop = os.path.join(cfg["dir"], "stop")
    ends = []
    while not os.path.exists(stop):
        step()
        ends.append(time.monotonic())
    return {"start": start, "step_ends": ends}


def pin(cfg: dict, role: str) -> None:
    """cfg["cpus"][role]: the CPUs this program (and every thread it starts) may run on."""
    cpus = cfg.get("cpus", {}).get(role)
    if cpus:
        os.sched_setaffinity(0, cpus)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("server", "trainer"):
        print("usage: inference_worker.py server|trainer CONFIG_JSON\n\n" + __doc__.split("\n\n")[0],
              file=sys.stderr if argv[:1] != ["--help"] else sys.stdout)
        return 0 if argv[:1] == ["--help"] else 2
    role, cfg = argv[0], json.loads(argv[1])
    pin(cfg, role)
    result = serve(cfg) if role == "server" else train(cfg)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
