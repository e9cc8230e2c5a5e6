#!/usr/bin/env python3
"""An inference server beside a training job (issue 32): the server's request latency and the
training's throughput, against each alone, in one run.

Programs: bench/scheduling/inference_worker.py (a fp16 transformer encoder server, batch 1, seq
128, Poisson arrivals; an fp32 MLP training loop). Per configuration (layers x mean gap), arms:
- server_alone, training_alone: natively, each alone on the GPU (the baselines);
- native: both at once without the library (the driver's own time-slicing);
- serial: both under libnvshare.so, mode serial, the server at NVSHARE_PRIORITY=10 (and
  NVSHARE_IDLE_RELEASE_MS=10 in every library arm: it gives the GPU up in its idle gaps);
- auto: the same in mode auto (both fit: they run together);
- latency_sensitive: as auto, the server also NVSHARE_LATENCY_SENSITIVE=1 (the training's queue is
  bounded by QUEUE_BOUND, --latency-queue-ms);
- serial_latency_sensitive: as serial, the server also latency-sensitive (the training's queue
  bounded, so that the server's preemption drains little);
- any arm with a scheduler as ARM@MS (--arms latency_sensitive@0.5,latency_sensitive@0.2): that
  arm with its own --latency-queue-ms, so that bounds are compared beside the same alone arms;
- any library arm as ARM+LABEL (with --compare LABEL=PATH): that arm with another libnvshare.so
  (an older tree's, built the same way), so that two libraries are compared in one run, on one
  machine (the scheduler is this tree's; the protocol is the same);
- diagnostic arms (not run by default, --arms): auto_keep_lock, as auto with the server never
  giving the lock up (NVSHARE_IDLE_RELEASE_MS=0: no handoff per request); ungated, both under the
  library with no scheduler (the interposer's own cost while the two run together).
--trainer small makes the training job a launch-bound MLP (inference_worker.TRAINERS), the case a
tight --latency-queue-ms costs most. --pin runs the server and the trainer each on a physical core
of its own (bench/core/cpus.py), the rest elsewhere. --trace DIR keeps, per library arm, the scheduler's --log-locks lines stamped on
arrival, the server's NVSHARE_DEBUG=1 lines, every request's times and the training's step ends.
Besides the latency, each arm reports the server's service time (an answer's own time, without
waiting for the earlier ones) and the share of its launches' wall time spent on the CPU.
The arms run in an order rotated every repetition (--reps), each with its own scheduler. Per arm:
p50/p99/p99.9 of request latency and their ratio to server_alone's; the training's steps per second
against training_alone's, over the whole arm and over the server's idle gaps (steps ending in a gap,
per second of gap); every answer's SHA-256 against server_alone's (bit-identical). The server and
the trainer run as the benchmark's user: as root (the GPU machine) the server's own
NVSHARE_PRIORITY and NVSHARE_LATENCY_SENSITIVE count (docs/protocol.md, "Priorities").

GPU safety (/work/shared/design.md): nothing starts with less than 48 GiB free; the two programs
take well under 2 GiB; no managed memory is asked for (the library's default VMM backing); every
process is ended when its arm ends, also on errors.

    python3 -m bench.scheduling.inference_beside_training --quick      # one size and rate, ~3 min
    python3 -m bench.scheduling.inference_beside_training              # 2 sizes x 2 rates, 2000 requests
    python3 -m bench.scheduling.inference_beside_training --dry-run    # no GPU: stand-ins, no library
Writes bench/results/inference-beside-training.json (or --json FILE).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.core import stats
from bench.core.argtypes import positive
from bench.core.common import REPO, harness, require_safe_gpu, say, torch_python
from bench.core.cpus import set_apart
from bench.scheduling.inference_results import summarise, table

PREFIX = "inference"
WORKER = Path(__file__).resolve().parent / "inference_worker.py"
RESULTS = REPO / "bench" / "results" / "inference-beside-training.json"
ARMS = ("server_alone", "training_alone", "native", "serial", "auto", "latency_sensitive",
        "serial_latency_sensitive")
DIAGNOSTIC_ARMS = ("auto_keep_lock", "ungated")
ALL_ARMS = ARMS + DIAGNOSTIC_ARMS
BASELINES = ("server_alone", "training_alone")
# arm -> (scheduler mode, None: no scheduler; the server latency-sensitive; the server's idle
# release, None: --server-idle-release-ms)
LIBRARY_ARMS = {"serial": ("serial", False, None), "auto": ("auto", False, None),
                "latency_sensitive": ("auto", True, None),
                "serial_latency_sensitive": ("serial", True, None),
                "auto_keep_lock": ("auto", False, 0), "ungated": (None, False, None)}
SERVER_PRIORITY = 10
# The server's NVSHARE_IDLE_RELEASE_MS under the library: it gives the lock up in its idle gaps (a
# request every 20 ms on average), so that in mode serial the training runs in them; the library's
# 250 ms would keep the training out for as long as requests keep coming.
SERVER_IDLE_RELEASE_MS = 10
TQ = 30  # explicit: priorities and the queue bound decide here, not the quantum
GPU_MEMORY = "16GiB"  # the virtual capacity of the library's arms: both fit (auto runs them together)
READY_TIMEOUT_S = 180.0


def plan(args) -> list[dict]:
    layers = [args.layers] if args.layers else ([6] if args.quick else [6, 12])
    means = [args.mean_ms] if args.mean_ms else ([20.0] if args.quick else [20.0, 100.0])
    return [{"layers": n, "mean_ms": m} for n in layers for m in means]


def arm_order(reps: int, arms=ARMS) -> list[tuple[int, str]]:
    """Every arm once per repetition, the order rotated by one each time (drift favours none)."""
    return [(r, arms[(i + r) % len(arms)]) for r in range(reps) for i in range(len(arms))]


def arm_base(arm: str) -> str:
    """The arm's kind: "latency_sensitive@0.2+old" is latency_sensitive with its own queue bound
    and the library --compare names old."""
    return arm.partition("+")[0].partition("@")[0]


def arm_bound_ms(arm: str) -> float | None:
    """The --latency-queue-ms an arm named KIND@MS gives its scheduler (None: the run's)."""
    _, sep, ms = arm.partition("+")[0].partition("@")
    return float(ms) if sep else None


def arm_label(arm: str) -> str | None:
    """The --compare label of an arm named KIND+LABEL (None: this tree's library)."""
    _, sep, label = arm.partition("+")
    return label if sep else None


def arm_library(arm: str, lib: Path | None, compare: dict[str, Path]) -> Path | None:
    """The libnvshare.so an arm runs with: the one --compare names for its label, else lib (None
    in a dry run: no library at all)."""
    label = arm_label(arm)
    return compare[label] if lib is not None and label is not None else lib


LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def _label_ok(label: str) -> bool:
    return 0 < len(label) <= 32 and set(label) <= LABEL_CHARS  # part of file names (--trace)


def _arm_item(text: str) -> str:
    text, plus, label = text.partition("+")
    if plus and not _label_ok(label):
        raise argparse.ArgumentTypeError(f"arm {text}+{label!r}: a label is 1-32 of A-Z a-z 0-9 _ . -")
    suffix = f"+{label}" if plus else ""
    base, sep, ms = text.partition("@")
    if base not in ALL_ARMS:
        raise argparse.ArgumentTypeError(f"unknown arm {text!r}; the arms: {', '.join(ALL_ARMS)}")
    if plus and base not in LIBRARY_ARMS:
        raise argparse.ArgumentTypeError(f"arm {text}{suffix!s}: only an arm under the library takes "
                                         f"+LABEL (another library, --compare)")
    if sep:
        if LIBRARY_ARMS.get(base, (None,))[0] is None:
            raise argparse.ArgumentTypeError(f"arm {text!r}: only an arm with a scheduler takes @MS "
                                             f"(its --latency-queue-ms)")
        try:
            bound = float(ms)
        except ValueError:
            bound = 0.0
        if not bound > 0:
            raise argparse.ArgumentTypeError(f"arm {text!r}: @MS must be a positive number of milliseconds")
        return f"{base}@{bound:g}{suffix}"
    return base + suffix


def arm_list(text: str) -> tuple[str, ...]:
    """--arms: a comma list of ARMS, each library arm with a scheduler optionally KIND@MS (its own
    --latency-queue-ms, so that bounds are compared within one run, beside the same alone arms);
    the two baselines are always run (every ratio needs them). In ALL_ARMS order, an arm's bounds
    in the order given."""
    chosen = list(dict.fromkeys(_arm_item(a.strip()) for a in text.split(",") if a.strip()))
    picked = [a for a in BASELINES if a not in chosen] + chosen
    return tuple(sorted(picked, key=lambda a: ALL_ARMS.index(arm_base(a))))


def _env(arm: str, role: str, lib: Path | None, sock: Path | None, cfg: dict,
         trace: bool = False) -> dict:
    """The role's environment in the arm. cfg: "idle_release_ms" (the server's), "lib_env" (role ->
    extra variables in library arms, --lib-env), "native_roles" (roles run without the library in
    library arms, --native-role)."""
    if arm_base(arm) not in LIBRARY_ARMS or lib is None or role in cfg.get("native_roles", ()):
        return harness.native_env()
    mode, sensitive, own_release = LIBRARY_ARMS[arm_base(arm)]
    extra = {}
    if mode is None:   # no scheduler: a socket nobody listens on, so the library runs ungated
        sock = Path(tempfile.gettempdir()) / "nvs-inference-no-scheduler.sock"
    if role == "server":
        extra["NVSHARE_PRIORITY"] = SERVER_PRIORITY
        extra["NVSHARE_IDLE_RELEASE_MS"] = cfg["idle_release_ms"] if own_release is None else own_release
        if sensitive:
            extra["NVSHARE_LATENCY_SENSITIVE"] = 1
        if trace:
            extra["NVSHARE_DEBUG"] = 1
    extra.update(cfg.get("lib_env", {}).get(role, {}))
    return harness.library_env(lib, sock, gpu_memory=GPU_MEMORY, **extra)


def compare_item(text: str) -> tuple[str, Path]:
    """--compare LABEL=PATH -> (label, path)."""
    label, sep, path = text.partition("=")
    if not sep or not path or not _label_ok(label):
        raise argparse.ArgumentTypeError(f"not LABEL=PATH (a label is 1-32 of A-Z a-z 0-9 _ . -): {text!r}")
    return label, Path(path)


def lib_env_item(text: str) -> tuple[tuple[str, ...], str, str]:
    """--lib-env [server:|trainer:]KEY=VALUE -> (roles, key, value)."""
    roles: tuple[str, ...] = ("server", "trainer")
    head, sep, value = text.partition("=")
    if ":" in head:
        who, head = head.split(":", 1)
        if who not in roles:
            raise argparse.ArgumentTypeError(f"not server: or trainer: {who!r}")
        roles = (who,)
    if not sep or not head.isidentifier():
        raise argparse.ArgumentTypeError(f"not [server:|trainer:]KEY=VALUE: {text!r}")
    return roles, head, value


def run_arm(arm: str, cfg: dict, python: str, lib: Path | None, dry_run: bool,
            trace: Path | None = None) -> dict:
    """One arm: its scheduler (library arms), its programs, their RESULTs. trace: a file for the
    scheduler's stamped lines, the programs' stderr and the server's result."""
    work = Path(tempfile.mkdtemp(prefix="nvs-inf-"))
    roles = {"server_alone": ["server"], "training_alone": ["trainer"]}.get(arm, ["server", "trainer"])
    sched = None
    progs, runs = {}, {}
    try:
        mode = LIBRARY_ARMS.get(arm_base(arm), (None,))[0]
        if mode is not None:
            extra = ("--no-nvml",) if dry_run else ()
            bound = arm_bound_ms(arm) or cfg.get("latency_queue_ms")
            if bound is not None:
                extra += ("--latency-queue-ms", f"{bound:g}")
            sched = harness.Scheduler(mode=mode, tq=TQ, extra_args=extra)
        for role in roles:
            conf = {**cfg, "dir": str(work)}
            progs[role] = harness.Program([python, str(WORKER), role, json.dumps(conf)],
                                          _env(arm, role, lib, sched and sched.socket, cfg,
                                               trace is not None))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not all((work / f"ready-{r}").exists() for r in roles):
            if time.monotonic() > deadline or any(p.proc.poll() is not None for p in progs.values()):
                raise RuntimeError(f"{arm}: a program did not get ready\n" +
                                   "\n".join(p.wait(5).describe() for p in progs.values()))
            time.sleep(0.05)
        (work / "start.tmp").write_text(f"{time.monotonic() + 0.5:.6f}")
        (work / "start.tmp").rename(work / "start")
        out = {}
        if "server" in progs:
            runs["server"] = progs["server"].wait(cfg["timeout_s"]).check()
            out["server"] = runs["server"].result
        else:  # training alone: as long as the server's schedule, or --training-alone-s
            time.sleep(min(cfg["duration_s"], cfg.get("training_alone_s") or cfg["duration_s"]))
        if "trainer" in progs:
            (work / "stop").touch()
            runs["trainer"] = progs["trainer"].wait(60).check()
            out["trainer"] = runs["trainer"].result
        if trace is not None:
            trace.write_text(json.dumps({
                "arm": arm, "server": out.get("server"), "trainer": out.get("trainer"),
                "scheduler_lines": list(sched.lines) if sched else [],
                "stderr": {role: run.stderr for role, run in runs.items()}}))
        return out
    finally:
        for p in progs.values():
            p.stop()
        if sched is not None:
            sched.stop()
        shutil.rmtree(work, ignore_errors=True)


# ----------------------------------------------------------------------------- the run

def run(args) -> dict:
    t0 = time.monotonic()
    if args.dry_run:
        python, lib = sys.executable, None
    else:
        require_safe_gpu()
        python, lib = torch_python(), harness.library_path()
    compare = dict(args.compare or [])
    out = {"params": {"requests": args.requests, "reps": args.reps, "server_priority": SERVER_PRIORITY,
                      "tq": TQ, "gpu_memory": GPU_MEMORY,
                      "server_idle_release_ms": args.server_idle_release_ms,
                      "latency_queue_ms": args.latency_queue_ms, "dry_run": args.dry_run,
                      "arms": list(args.arms), "trainer": args.trainer,
                      "compare": {label: str(path) for label, path in compare.items()}},
           "configs": []}
    lib_env: dict[str, dict[str, str]] = {}
    for roles, key, value in args.lib_env or []:
        for role in roles:
            lib_env.setdefault(role, {})[key] = value
    out["params"].update(lib_env=lib_env, native_roles=args.native_role or [])
    cpus = None
    if args.pin:
        cpus = set_apart(["server", "trainer"])
        if cpus is None:
            say(PREFIX, "--pin: too few physical cores to set two apart; the programs are not pinned")
        else:  # the schedulers (and anything else this starts) inherit the rest
            os.sched_setaffinity(0, cpus["rest"])
    out["params"]["cpus"] = cpus
    for config in plan(args):
        from bench.scheduling.inference_worker import arrivals
        duration = arrivals(args.requests, config["mean_ms"], args.seed)[-1]
        cfg = {**config, "requests": args.requests, "seed": args.seed, "stand_in": args.dry_run,
               "idle_release_ms": args.server_idle_release_ms, "latency_queue_ms": args.latency_queue_ms,
               "lib_env": lib_env, "native_roles": args.native_role or [], "cpus": cpus or {},
               "trainer": args.trainer, "training_alone_s": args.training_alone_s,
               "stand_in_ms": 2.0, "duration_s": duration, "timeout_s": 120 + 20 * duration}
        runs: dict[str, list[dict]] = {}
        for rep, arm in arm_order(args.reps, args.arms):
            say(PREFIX, f"layers {config['layers']}, mean {config['mean_ms']:g} ms: {arm} "
                        f"(repetition {rep + 1}/{args.reps}, ~{duration:.0f} s)")
            trace = args.trace / f"{arm}-{config['layers']}-{config['mean_ms']:g}-{rep}.json" \
                if args.trace else None
            runs.setdefault(arm, []).append(run_arm(arm, cfg, python, arm_library(arm, lib, compare),
                                                    args.dry_run, trace))
        arms = summarise(runs)
        print(table(config, arms), flush=True)
        out["configs"].append({**config, "arms": arms,
                               "raw": {a: [{"latency_s": r.get("server", {}).get("latency_s")} for r in reps]
                                       for a, reps in runs.items()}})
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="one size (6 layers), one rate (20 ms), 1000 requests, one repetition")
    p.add_argument("--requests", type=positive(int), help="requests per arm (default 2000; quick 1000)")
    p.add_argument("--reps", type=positive(int), help="repetitions of every arm (default 2; quick 1)")
    p.add_argument("--layers", type=positive(int), help="one model size instead of 6 and 12")
    p.add_argument("--mean-ms", type=positive(float), help="one mean gap instead of 20 and 100 ms")
    p.add_argument("--seed", type=int, default=32)
    p.add_argument("--arms", type=arm_list, default=ARMS,
                   help=f"a comma list of arms to run (the baselines always run); default: {', '.join(ARMS)};"
                        f" diagnostic: {', '.join(DIAGNOSTIC_ARMS)}; an arm with a scheduler as ARM@MS runs"
                        f" with that --latency-queue-ms (e.g. latency_sensitive@0.5,latency_sensitive@0.2);"
                        f" an arm under the library as ARM+LABEL runs with --compare's LABEL library")
    p.add_argument("--server-idle-release-ms", type=int, default=SERVER_IDLE_RELEASE_MS,
                   help=f"the server's NVSHARE_IDLE_RELEASE_MS under the library ({SERVER_IDLE_RELEASE_MS})")
    p.add_argument("--latency-queue-ms", type=positive(float), metavar="MS",
                   help="the schedulers' --latency-queue-ms (their default when left out)")
    p.add_argument("--compare", type=compare_item, action="append", metavar="LABEL=PATH",
                   help="another libnvshare.so, for the arms named ARM+LABEL (an older tree's, built the "
                        "same way: same run, same machine)")
    p.add_argument("--lib-env", type=lib_env_item, action="append", metavar="[ROLE:]KEY=VALUE",
                   help="an extra variable for the programs under the library (server: or trainer: only)")
    p.add_argument("--native-role", choices=("server", "trainer"), action="append",
                   help="run this program without the library in the library arms too")
    p.add_argument("--training-alone-s", type=positive(float), metavar="S",
                   help="run the training_alone baseline this long at most (a rate: steps per "
                        "second; default: as long as the server's schedule)")
    p.add_argument("--trainer", choices=("large", "small"), default="large",
                   help="the training job: large kernels (default) or a launch-bound small MLP")
    p.add_argument("--pin", action="store_true",
                   help="the server and the trainer each on a physical core of its own, the rest elsewhere")
    p.add_argument("--trace", type=Path, metavar="DIR",
                   help="keep each arm's scheduler lines, the server's debug lines and request times here")
    p.add_argument("--dry-run", action="store_true",
                   help="no GPU: stand-in programs (sleeps), no library: checks the plumbing")
    p.add_argument("--json", type=Path, help=f"write the results here (default {RESULTS.relative_to(REPO)})")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    labels = dict(args.compare or [])
    for arm in args.arms:
        if arm_label(arm) is not None and arm_label(arm) not in labels:
            parser.error(f"arm {arm}: no --compare {arm_label(arm)}=PATH")
    for label, path in labels.items():
        if not args.dry_run and not path.is_file():
            parser.error(f"--compare {label}={path}: no such file")
    if args.trace:
        args.trace.mkdir(parents=True, exist_ok=True)
    args.requests = args.requests or (1000 if args.quick else 2000)
    args.reps = args.reps or (1 if args.quick else 2)
    result = run(args)
    path = args.json or RESULTS
    path.write_text(json.dumps(result, indent=1))
    say(PREFIX, f"results in {path} ({result['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
