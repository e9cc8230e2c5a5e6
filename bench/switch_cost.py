#!/usr/bin/env python3
"""Switch cost: how long a client whose W GiB were evicted to host takes to be back at full speed,
with bulk prefetch (NVSHARE_PREFETCH=wait, =overlap) and with demand faults (=off).

A (a PyTorch process under libnvshare.so: bench/switch_worker.py) holds W GiB in one float32 tensor
and loops passes `x.add_(1.0); torch.cuda.synchronize()`, recording (t_start, t_end) of every pass
with time.monotonic() (CLOCK_MONOTONIC: one clock for every process of the machine). Scheduler: mode
auto, explicit --tq (60 s), a virtual capacity (--gpu-memory) of max(W) + 6 GiB and an explicit
--reserve. Once A is steady, B (bench/protoclient.py, not a GPU process; priority 10 > A's 0)
attaches A's GPU, reports a footprint that fits alone but not beside A (capacity - reserve - A's
footprint / 2) and asks for the lock: the scheduler preempts A with DROP_LOCK EVICT, A drains, moves
its W GiB to host in bulk (after its release, by default); B gets LOCK_OK, keeps the GPU long
enough for that move to finish (max(0.3 s, 0.25 s per GiB), as a real holder keeps it for a
quantum), notes t_rel and releases; A is granted again with PREFETCH. The switch cost is the end of A's first pass that ends after t_rel,
minus t_rel: that pass touches all W GiB, so it ends when the data is back (plus one ordinary pass).
Also per cycle: B's wait (A's drain + eviction + two scheduler hops), the time until a pass is back
within 25% of the steady pass time, and the scheduler's log of the switch (drop evict=yes|no,
release drain/evict/prefetch ms, grant prefetch=yes|no).

One A process per variant covers every size (allocate, measure, free, next size), so PyTorch starts
three times. Each B cycle runs --cycles times per size (A steady again in between); medians are
reported. After each size A checks that every element equals its number of passes: the data
survived every eviction and prefetch.

    python3 bench/switch_cost.py [--quick] [--sizes 1,4,8] [--cycles 3] [--json out.json]

GPU safety: one A process at a time holds at most max(W) GiB (default 8, at most 16 allowed) plus
its CUDA context; NVSHARE_GPU_MEMORY equals the scheduler's capacity; nothing starts when the GPU has
less than 48 GiB free; A is ended whatever happens.

run(quick, time_left) returns {"parameters", "variants": {variant: {"sizes": {"8": {"switch_ms",
"handoff_ms", "recovered_ms", "steady_pass_ms", "evict_ms", "drain_ms", "prefetch_ms", "cycles":
[...], "data_ok"}}, "error"?}}, "headline": {"8": {"wait_ms", "overlap_ms", "off_ms",
"demand_vs_wait", "demand_vs_overlap", "demand_vs_bulk", "faster_bulk", "goal_met"}}, "seconds"}.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from schedlog import duration_s, ms  # noqa: E402
from switch_worker import GIB, MIB, Progress, size_key  # noqa: E402
from render import bars, dig, error_of, error_row, f, goal_row, num, numeric_items, yes_no  # noqa: E402
from stats import median  # noqa: E402

VARIANTS = ("wait", "off", "overlap")  # the ones the headline needs first, if time runs short
DEFAULT_SIZES = (1.0, 4.0, 8.0)
MAX_SIZE_GIB = 16.0            # GPU safety: all processes under the library stay <= 24 GiB
HEADROOM_GIB = 6.0             # capacity = max(W) + this
RESERVE = 512 * MIB            # --reserve of the scheduler: B's footprint is computed from it
GOAL_RATIO = 8.0               # bulk switches at least 8x faster than demand faults
B_PRIORITY = 10
RECOVERED_WITHIN = 1.25        # "full speed": a pass within 25% of the steady pass time
RERUN = "python3 bench/switch_cost.py"
NAME = "switch_cost"
TITLE = "Switch cost: bulk prefetch vs demand faults"
SHARE, MIN_S, GPU = 80, 35, True
PLOTS = {"switch-cost.png": "switch cost per size: wait, overlap, demand faults",
         "switch-timeline.png": "A's passes around one switch of the largest size"}
# Seconds, for planning within a time budget: cautious estimates of PyTorch's start, the per-size and
# per-cycle overheads and the eviction, bulk prefetch and demand-fault rates (the measured switch times
# are in docs/benchmarks.md).
START_S, SIZE_OVERHEAD_S, CYCLE_OVERHEAD_S = 12.0, 1.5, 0.4
EVICT_S_PER_GIB, BULK_S_PER_GIB, DEMAND_S_PER_GIB = 0.06, 0.03, 0.25


# ----------------------------------------------------------------------------- reading the results

def durations(passes: list[tuple[float, float]]) -> list[float]:
    return [t1 - t0 for t0, t1 in passes]


def steady_pass_s(passes: list[tuple[float, float]], before: float, skip: int = 5) -> float | None:
    """Median pass time before the first switch (the first `skip` passes warm up)."""
    before_switch = [p for p in passes if p[1] < before][skip:]
    return median(durations(before_switch)) if before_switch else None


HOLD_S_PER_GIB = 0.25  # B's hold: A's move to host runs at 5-10 GB/s after its release


def hold_s(w_gib: float) -> float:
    return max(0.3, HOLD_S_PER_GIB * w_gib)


def analyse_cycle(passes: list[tuple[float, float]], t_req: float, t_rel: float,
                  steady_s: float | None, window: tuple[int, int] = (3, 8)) -> dict:
    """The switch seen from A's passes. Times in ms; `window` passes around it, relative to t_rel."""
    after = [i for i, (_, t1) in enumerate(passes) if t1 > t_rel]
    if not after:
        return {"error": "no pass of A ended after B released"}
    first = after[0]
    t0, t1 = passes[first]
    recovered = None
    if steady_s:
        for s0, s1 in passes[first:]:
            if s1 - s0 <= RECOVERED_WITHIN * steady_s:
                recovered = (s1 - t_rel) * 1e3
                break
    lo, hi = max(0, first - window[0]), min(len(passes), first + window[1])
    return {
        "switch_ms": (t1 - t_rel) * 1e3,
        "first_pass_ms": (t1 - t0) * 1e3,
        "handoff_ms": (t_rel - t_req) * 1e3,
        "recovered_ms": recovered,
        "window": [[round((s0 - t_rel) * 1e3, 3), round((s1 - t_rel) * 1e3, 3)] for s0, s1 in passes[lo:hi]],
    }


def match_log(events: list, t_req: float, t_rel: float) -> dict:
    """The scheduler's lines about A for one cycle: its drop and release after t_req, its grant
    after t_rel. `events` are harness.Event objects for A's pid, in order."""
    def first(kind: str, after: float, pred=lambda e: True):
        return next((e for e in events if e.kind == kind and e.t >= after and pred(e)), None)

    drop = first("drop", t_req)
    release = first("release", t_req, lambda e: e.fields.get("reason") != "idle")
    grant = first("grant", t_rel)
    return {
        "drop_reason": drop.fields.get("reason") if drop else None,
        "evict_flag": drop.fields.get("evict") if drop else None,
        "drain_ms": ms(duration_s(release.fields.get("drain"))) if release else None,
        "evict_ms": ms(duration_s(release.fields.get("evict"))) if release else None,
        "regrant_prefetch": grant.fields.get("prefetch") if grant else None,
        "regrant_t": grant.t if grant else None,
    }


def prefetch_of_regrant(events: list, regrant_t: float | None) -> float | None:
    """A release reports the prefetch of the grant it gives back: the first release after the
    re-grant (the next cycle's, or an idle release) carries this cycle's prefetch time."""
    if regrant_t is None:
        return None
    release = next((e for e in events if e.kind == "release" and e.t > regrant_t), None)
    return ms(duration_s(release.fields.get("prefetch"))) if release else None


def summarise_size(cycles: list[dict], steady_s: float | None, data_ok: bool | None, passes: int) -> dict:
    ok = [c for c in cycles if "error" not in c]
    return {
        "switch_ms": median([c["switch_ms"] for c in ok]),
        "switch_ms_all": [round(c["switch_ms"], 3) for c in ok],
        "handoff_ms": median([c["handoff_ms"] for c in ok]),
        "recovered_ms": median([c.get("recovered_ms") for c in ok]),
        "steady_pass_ms": steady_s * 1e3 if steady_s else None,
        "evict_ms": median([c.get("evict_ms") for c in ok]),
        "drain_ms": median([c.get("drain_ms") for c in ok]),
        "prefetch_ms": median([c.get("prefetch_ms") for c in ok]),
        "evict_flags": [c.get("evict_flag") for c in ok],
        "regrant_prefetch": [c.get("regrant_prefetch") for c in ok],
        "cycles": cycles,
        "passes": passes,
        "data_ok": data_ok,
    }


def headline(variants: dict) -> dict:
    """Per size: each variant's median switch, demand / bulk ratios, the faster bulk variant."""
    sizes: list[str] = []
    for v in variants.values():
        for key in (v.get("sizes") or {}):
            if key not in sizes:
                sizes.append(key)
    out = {}
    for key in sizes:
        ms = {name: ((variants.get(name) or {}).get("sizes") or {}).get(key, {}).get("switch_ms")
              for name in ("wait", "overlap", "off")}
        row = {f"{name}_ms": value for name, value in ms.items()}
        for bulk in ("wait", "overlap"):
            row[f"demand_vs_{bulk}"] = ms["off"] / ms[bulk] if ms["off"] and ms[bulk] else None
        bulks = {b: ms[b] for b in ("wait", "overlap") if ms[b]}
        row["faster_bulk"] = min(bulks, key=bulks.get) if bulks else None
        row["demand_vs_bulk"] = row[f"demand_vs_{row['faster_bulk']}"] if row["faster_bulk"] else None
        row["goal_met"] = None if row["demand_vs_bulk"] is None else row["demand_vs_bulk"] >= GOAL_RATIO
        out[key] = row
    return out


# ----------------------------------------------------------------------------- planning

def estimate_s(sizes: list[float], cycles: int, variants: tuple[str, ...] = VARIANTS) -> float:
    total = 0.0
    for variant in variants:
        back = DEMAND_S_PER_GIB if variant == "off" else BULK_S_PER_GIB
        total += START_S + sum(SIZE_OVERHEAD_S + cycles * (CYCLE_OVERHEAD_S + w * (EVICT_S_PER_GIB + back))
                               for w in sizes)
    return total


def plan(quick: bool, time_left: float | None, sizes: list[float] | None = None,
         cycles: int | None = None) -> dict:
    """Sizes and cycles that fit the time: fewer cycles first (down to 2), then the largest sizes go."""
    sizes = sorted(sizes or DEFAULT_SIZES)
    cycles = cycles or (2 if quick else 3)
    dropped: list[float] = []
    if time_left is not None:
        while cycles > 2 and estimate_s(sizes, cycles) > time_left:
            cycles -= 1
        while len(sizes) > 1 and estimate_s(sizes, cycles) > time_left:
            dropped.append(sizes.pop())
        if estimate_s(sizes, cycles) > time_left:
            cycles = 1
    return {"sizes": sizes, "cycles": cycles, "dropped_sizes": dropped,
            "estimate_s": round(estimate_s(sizes, cycles), 1)}


# ----------------------------------------------------------------------------- the benchmark

def _wait(cond, timeout: float, what: str, alive=lambda: True, interval: float = 0.005):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if not alive():
            raise RuntimeError(f"A exited while waiting for {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# (variant, sizes, control dir, warm passes, scheduler socket, capacity) -> (argv, env) of A
ACommand = Callable[[str, list, Path, int, Path, int], tuple[list, dict]]


def library_worker(lib: Path, debug: bool = False) -> ACommand:
    """A as it is measured: bench/switch_worker.py, a PyTorch process under libnvshare.so."""
    def command(variant: str, sizes: list[float], ctrl: Path, warm_passes: int, sock: Path,
                capacity: int) -> tuple[list, dict]:
        from common import harness

        env = harness.library_env(lib, sock, gpu_memory=f"{capacity // MIB}MiB", NVSHARE_PREFETCH=variant,
                                  NVSHARE_PRIORITY=0, **({"NVSHARE_DEBUG": 1} if debug else {}))
        argv = harness.python_cmd(BENCH / "switch_worker.py", "--sizes",
                                  ",".join(size_key(w) for w in sizes), "--control", ctrl,
                                  "--warm-passes", warm_passes)
        return argv, env
    return command


class VariantRun:
    """One A process (one NVSHARE_PREFETCH variant) and B's cycles against it, size by size."""

    def __init__(self, sched, b_holder: dict, variant: str, sizes: list[float], cycles: int,
                 capacity: int, ctrl: Path, warm_passes: int, steady_passes: int,
                 deadline: float | None, a_command: ACommand) -> None:
        from common import harness

        self.harness, self.sched, self.b_holder = harness, sched, b_holder
        self.variant, self.sizes, self.cycles, self.capacity = variant, sizes, cycles, capacity
        self.ctrl, self.warm_passes, self.steady_passes, self.deadline = ctrl, warm_passes, steady_passes, deadline
        ctrl.mkdir(parents=True, exist_ok=True)
        argv, env = a_command(variant, sizes, ctrl, warm_passes, sched.socket, capacity)
        self.progress = Progress(ctrl / "progress")
        self.prog = harness.Program(argv, env)

    def alive(self) -> bool:
        return self.prog.proc.poll() is None

    def _b(self, a_pid: int):
        """B, attached to A's GPU (the same client for every variant)."""
        from protoclient import ProtoClient, client_gpus, ctl

        if self.b_holder.get("client") is None:
            gpus = _wait(lambda: client_gpus(ctl(self.sched.socket, "status"), a_pid), 30,
                         "A to attach its GPU", self.alive, interval=0.05)
            b = ProtoClient(self.sched.socket, priority=B_PRIORITY, timeout=30)
            attached = b.attach(gpus[0]["uuid"], capacity=self.capacity, name="switch_cost B")
            self.b_holder.update(client=b, uuid=gpus[0]["uuid"], capacity=attached.capacity or self.capacity)
        return self.b_holder["client"]

    def _a_footprint(self, a_pid: int, w: float) -> int:
        """A's footprint as the scheduler sees it once the size's allocation has been reported."""
        from protoclient import client_gpus, ctl, footprint

        def reported():
            gpus = [g for g in client_gpus(ctl(self.sched.socket, "status"), a_pid)
                    if g.get("uuid") == self.b_holder.get("uuid")]
            fp = footprint(gpus[0]) if gpus else 0
            return fp if fp >= 0.9 * w * GIB else None
        try:
            return _wait(reported, 5, "A's MEM_UPDATE", self.alive, interval=0.05)
        except TimeoutError:
            return int(w * GIB)

    def _wait_steady_after(self, t_rel: float) -> None:
        """Until A has ended its first pass after t_rel and `steady_passes` more."""
        def switched():
            p = self.progress.read()
            return p if p and p[2] > t_rel else None
        first = _wait(switched, 120, "A to run again after the switch", self.alive)
        _wait(lambda: (p := self.progress.read()) and p[0] == first[0] and p[1] >= first[1] + self.steady_passes,
              60, "A to be steady again", self.alive)

    def _out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def measure(self) -> dict:
        result: dict = {"sizes": {}, "pid": self.prog.pid}
        a_pid = self.prog.pid
        try:
            for n, w in enumerate(self.sizes):
                key = size_key(w)
                if self._out_of_time() and result["sizes"]:
                    for rest in self.sizes[n:]:  # A stops each after one pass
                        (self.ctrl / f"stop-{size_key(rest)}").touch()
                        result["sizes"][size_key(rest)] = {"error": "skipped: out of time"}
                    break
                _wait(lambda: (self.ctrl / f"steady-{key}").exists(), 180, f"A to allocate {key} GiB and warm up",
                      self.alive)
                b = self._b(a_pid)
                b_footprint = self.b_holder["capacity"] - RESERVE - self._a_footprint(a_pid, w) // 2
                mem = b.mem_update_frame(max(b_footprint, 1))
                timings = []
                for i in range(self.cycles):
                    if i and self._out_of_time():
                        break
                    t_req = time.monotonic()
                    b.request(mem)
                    grant = b.wait_grant(timeout=30)
                    t_got = time.monotonic()
                    # B keeps the GPU as a real holder would for (part of) a quantum: long enough
                    # for A's move to host (after its release, about 10 GB/s) to finish, so that
                    # A comes back to data that is really on the host.
                    time.sleep(hold_s(w))
                    t_rel = time.monotonic()
                    b.release()
                    timings.append((t_req, t_rel, grant.flags, t_rel - t_got))
                    self._wait_steady_after(t_rel)
                    print(f"switch_cost: {self.variant} {key} GiB cycle {i + 1}: B waited "
                          f"{(t_got - t_req) * 1e3:.0f} ms, held {(t_rel - t_got) * 1e3:.0f} ms",
                          flush=True)
                (self.ctrl / f"stop-{key}").touch()
                done = self.ctrl / f"passes-{key}.json"
                _wait(done.exists, 120, f"A's passes of {key} GiB", self.alive)
                result["sizes"][key] = self._analyse(json.loads(done.read_text()), timings, a_pid, b_footprint)
                row = result["sizes"][key]
                print(f"switch_cost: {self.variant} {key} GiB: switch {row['switch_ms'] or float('nan'):.1f} ms "
                      f"(steady pass {row['steady_pass_ms'] or float('nan'):.2f} ms)", flush=True)
            run = self.prog.wait(120)
            result["a_stderr_tail"] = run.stderr[-2000:]
            if run.returncode != 0:
                result["error"] = f"A exited with {run.returncode}: {run.stderr.strip()[-500:]}"
        except Exception as e:
            raise RuntimeError(f"{type(e).__name__}: {e}\n{self._a_output()}") from e
        finally:
            self.prog.stop()
            self.progress.close()
        return result

    def _a_output(self) -> str:
        """A's exit status and output, for an error message (A is ended if it still runs)."""
        try:
            return self.prog.wait(0.5).describe(1500)
        except AssertionError as e:  # it was still running: wait() ended it
            return str(e)[-3000:]
        except Exception:  # its output was already collected (and is in the error itself)
            return ""

    def _analyse(self, dump: dict, timings: list, a_pid: int, b_footprint: int) -> dict:
        passes = [tuple(p) for p in dump["passes"]]
        steady = steady_pass_s(passes, timings[0][0]) if timings else None
        events = self.sched.events(pids={a_pid})
        cycles = []
        for t_req, t_rel, flags, held in timings:
            c = analyse_cycle(passes, t_req, t_rel, steady)
            c["handoff_ms"] -= held * 1e3  # B's wait for the GPU, not its hold
            c["b_held_ms"] = held * 1e3
            c.update(match_log(events, t_req, t_rel))
            c["prefetch_ms"] = prefetch_of_regrant(events, c.get("regrant_t"))
            c["b_grant_flags"] = flags
            c["t_req"], c["t_rel"] = t_req, t_rel
            cycles.append(c)
        row = summarise_size(cycles, steady, dump.get("data_ok"), len(passes))
        row["b_footprint_bytes"] = b_footprint
        return row


def measure(a_command: ACommand, sizes: list[float], cycles: int, variants: tuple[str, ...] = VARIANTS,
            tq: float = 60.0, warm_passes: int = 20, steady_passes: int = 5,
            deadline: float | None = None, scheduler_args: tuple[str, ...] = ()) -> dict:
    """The whole benchmark with A started by `a_command` (library_worker(lib) on a GPU)."""
    from common import harness
    from protoclient import children_can_import_xpushare

    children_can_import_xpushare()
    t_begin = time.monotonic()
    capacity = int((max(sizes) + HEADROOM_GIB) * GIB)
    params = {"sizes_gib": sizes, "cycles": cycles, "variants": list(variants), "tq_s": tq,
              "capacity_gib": capacity / GIB, "reserve_mib": RESERVE // MIB, "b_priority": B_PRIORITY,
              "warm_passes": warm_passes, "steady_passes": steady_passes, "mode": "auto",
              "b_footprint": "capacity - reserve - A's footprint / 2 (fits alone, not beside A)"}
    out: dict = {"parameters": params, "variants": {}}
    extra = ("--gpu-memory", f"{capacity // MIB}MiB", "--reserve", f"{RESERVE // MIB}MiB", *scheduler_args)
    b_holder: dict = {}
    with tempfile.TemporaryDirectory(prefix="nvs-switch-", dir="/tmp") as tmp, \
            harness.Scheduler(mode="auto", tq=tq, extra_args=extra) as sched:
        try:
            for variant in variants:
                if deadline is not None and time.monotonic() > deadline and out["variants"]:
                    out["variants"][variant] = {"error": "skipped: out of time"}
                    continue
                print(f"switch_cost: NVSHARE_PREFETCH={variant} ...", flush=True)
                try:
                    run = VariantRun(sched, b_holder, variant, sizes, cycles, capacity,
                                     Path(tmp) / variant, warm_passes, steady_passes, deadline, a_command)
                    out["variants"][variant] = run.measure()
                except Exception as e:  # one variant failing must not lose the others
                    out["variants"][variant] = {"error": f"{type(e).__name__}: {e}"}
                    print(f"switch_cost: {variant} FAILED: {e}", flush=True)
                    # B may have a request still queued: the next variant gets a fresh B.
                    if b_holder.get("client") is not None:
                        b_holder.pop("client").close()
        finally:
            if b_holder.get("client") is not None:
                b_holder["client"].close()
        out["scheduler_log_tail"] = sched.log()[-4000:]
    out["headline"] = headline(out["variants"])
    out["seconds"] = round(time.monotonic() - t_begin, 1)
    return out


def run(quick: bool = False, time_left: float | None = None) -> dict:
    from common import harness, require_safe_gpu

    t0 = time.monotonic()
    require_safe_gpu()
    p = plan(quick, time_left)
    deadline = None if time_left is None else t0 + time_left
    result = measure(library_worker(harness.library_path()), p["sizes"], p["cycles"], deadline=deadline)
    result["parameters"]["dropped_sizes_gib"] = p["dropped_sizes"]
    result["parameters"]["estimate_s"] = p["estimate_s"]
    result["rerun"] = RERUN + (" --quick" if quick else "")
    return result


def parse_sizes(text: str) -> list[float]:
    try:
        sizes = [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad size list {text!r}: GiB numbers separated by commas") from None
    if not sizes or any(not 0 < s <= MAX_SIZE_GIB for s in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be in (0, {MAX_SIZE_GIB:g}] GiB (GPU safety)")
    return sizes


def parse_variants(text: str) -> tuple[str, ...]:
    variants = tuple(v.strip() for v in text.split(",") if v.strip())
    bad = [v for v in variants if v not in VARIANTS]
    if not variants or bad:
        raise argparse.ArgumentTypeError(f"variants are {', '.join(VARIANTS)}")
    return variants


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 cycles per size")
    p.add_argument("--sizes", type=parse_sizes, help="GiB held by A, comma-separated (default 1,4,8)")
    p.add_argument("--cycles", type=int, help="B cycles per size and variant (default 3)")
    p.add_argument("--variants", type=parse_variants, default=VARIANTS,
                   help="NVSHARE_PREFETCH values, comma-separated (default wait,off,overlap)")
    p.add_argument("--tq", type=float, default=60.0, help="the scheduler's explicit quantum, s (default 60)")
    p.add_argument("--debug-a", action="store_true", help="run A with NVSHARE_DEBUG=1 (its log tail goes "
                   "into the result)")
    p.add_argument("--json", type=Path, help="write the result here")
    args = p.parse_args(argv)
    if args.cycles is not None and args.cycles < 1:
        p.error("--cycles must be >= 1")
    if args.tq <= 0:
        p.error("--tq must be positive")
    from common import require_safe_gpu

    try:
        require_safe_gpu()
    except RuntimeError as e:
        print(f"switch_cost: {e}", file=sys.stderr)
        return 3
    from common import harness

    params = plan(args.quick, None, args.sizes, args.cycles)
    result = measure(library_worker(harness.library_path(), args.debug_a), params["sizes"], params["cycles"],
                     args.variants, args.tq)
    result["rerun"] = " ".join([RERUN, *(argv if argv is not None else sys.argv[1:])])
    for key, row in result["headline"].items():
        print(f"{key:>4} GiB  wait {_ms(row['wait_ms'])}  overlap {_ms(row['overlap_ms'])}  off {_ms(row['off_ms'])}"
              f"  demand/bulk {row['demand_vs_bulk'] or float('nan'):.1f}x ({row['faster_bulk']} faster)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    failed = [v for v, r in result["variants"].items() if "error" in r]
    return 1 if failed else 0


def _ms(value: float | None) -> str:
    return "      —" if value is None else f"{value:7.1f} ms"


# ----------------------------------------------------------------------------- its report

def goals(section: dict) -> list[str]:
    if error_of(section):
        return [error_row("switch cost, bulk vs demand", error_of(section))]
    rows = []
    for size, row in numeric_items(dig(section, "headline")):
        bulk = row.get("faster_bulk")
        r = num(row.get("demand_vs_bulk"))
        other = "overlap" if bulk == "wait" else "wait"
        measured = (f"{f(row.get(f'{bulk}_ms'), 1)} ms (NVSHARE_PREFETCH={bulk}; {other}: "
                    f"{f(row.get(f'{other}_ms'), 1)} ms)") if bulk else "—"
        rows.append(goal_row(f"switch back of {size} GiB evicted to host: bulk prefetch vs demand faults",
                         measured, f"{f(row.get('off_ms'), 1)} ms (demand)", f"**{f(r, 1)}x** faster",
                         f"≥ {GOAL_RATIO:g}x", None if r is None else r >= GOAL_RATIO))
    return rows or [error_row("switch cost", "no sizes measured")]


def section(s: dict) -> str:
    lines = ["| W GiB | NVSHARE_PREFETCH | switch ms (median) | each cycle ms | back to full speed ms | "
             "steady pass ms | B waited ms | evict ms (log) | prefetch ms (log) | drop had EVICT | "
             "data intact |", "|---:|---|---:|---|---:|---:|---:|---:|---:|---|---|"]
    variants = s.get("variants") or {}
    sizes = [k for k, _ in numeric_items(dig(s, "headline"))] or sorted(
        {k for v in variants.values() if isinstance(v, dict) for k in (v.get("sizes") or {})})
    for size in sizes:
        for name in ("wait", "overlap", "off"):
            v = variants.get(name)
            if v is None:
                continue
            if error_of(v) and not v.get("sizes"):
                lines.append(f"| {size} | {name} | not measured: `{error_of(v)}` | | | | | | | | |")
                continue
            row = dig(v, "sizes", size)
            if not isinstance(row, dict) or error_of(row):
                lines.append(f"| {size} | {name} | not measured: `{error_of(row) or 'missing'}` | | | | | | | | |")
                continue
            each = ", ".join(f(x, 1) for x in row.get("switch_ms_all") or []) or "—"
            flags = row.get("evict_flags") or []
            lines.append(f"| {size} | {name} | **{f(row.get('switch_ms'))}** | {each} | {f(row.get('recovered_ms'))} | "
                         f"{f(row.get('steady_pass_ms'), 2)} | {f(row.get('handoff_ms'))} | {f(row.get('evict_ms'))} | "
                         f"{f(row.get('prefetch_ms'))} | {', '.join(str(x) for x in flags) or '—'} | "
                         f"{'yes' if row.get('data_ok') else ('no' if row.get('data_ok') is False else '—')} |")
    for name, v in variants.items():
        if isinstance(v, dict) and v.get("sizes") and error_of(v):
            lines.append(f"\nNVSHARE_PREFETCH={name}: `{error_of(v)}`")
    head = ["\n| W GiB | demand / wait | demand / overlap | faster bulk variant | ≥ 8x |", "|---:|---:|---:|---|---|"]
    for size, row in numeric_items(dig(s, "headline")):
        head.append(f"| {size} | {f(row.get('demand_vs_wait'), 1)}x | {f(row.get('demand_vs_overlap'), 1)}x | "
                    f"{row.get('faster_bulk') or '—'} | {yes_no(row.get('goal_met'))} |")
    p = s.get("parameters") or {}
    return "\n".join(lines + head) + (
        "\n\nA: a PyTorch process under libnvshare.so holds W GiB in one float32 tensor and loops "
        "`x.add_(1.0); torch.cuda.synchronize()`, recording each pass's start and end (CLOCK_MONOTONIC). "
        f"Scheduler: mode auto, `--tq {f(p.get('tq_s'), 0)}`, virtual capacity `--gpu-memory "
        f"{f(p.get('capacity_gib'), 0)}GiB`, `--reserve {p.get('reserve_mib', '?')}MiB`. When A is steady, B "
        "(a protocol client, no GPU work, priority 10 against A's 0) attaches the same GPU with a footprint "
        "that fits alone but not beside A, and asks for the lock: A is preempted with EVICT, drains, "
        "releases and moves its W GiB to host in bulk (NVSHARE_EVICT=background: after the release); B is "
        "granted, keeps the GPU long enough for that move to finish (max(0.3 s, 0.25 s per GiB), as a "
        "holder would for a quantum), notes t_rel and releases; A is "
        "granted again with PREFETCH. **Switch** = end of A's first pass that ends after t_rel, minus t_rel: "
        "that pass touches all W GiB, so it ends when the data is back (it includes the scheduler's grant and "
        "one ordinary pass). *Back to full speed*: until a pass takes at most 1.25x the steady pass. *B "
        "waited*: the other direction of the switch (drain, two scheduler hops; the eviction when it comes "
        "before the release). wait = the first "
        "kernels wait for the bulk prefetch; overlap = they run while it proceeds; off = no prefetch, pages "
        f"come back by demand faults (eviction on the handoff is real in all three). {p.get('cycles', '?')} "
        "cycles per size and variant, one A process per variant; medians. After each size A checks that "
        "every element equals its number of passes (data intact across the evictions).\n")


def plot_switch(plt, s: dict):
    rows = numeric_items(s.get("headline"))
    if not rows:
        return None
    groups = [f"{k} GiB" for k, _ in rows]
    series = {f"NVSHARE_PREFETCH={v}": [num(r.get(f"{v}_ms")) for _, r in rows] for v in ("wait", "overlap", "off")}
    return bars(plt, groups, series, "switch ms (log)", "time until A's data is back on the GPU", log=True)


def plot_switch_timeline(plt, s: dict):
    """Pass durations around the first switch of the largest size, per variant."""
    variants = s.get("variants") or {}
    sizes = [k for k, _ in numeric_items(s.get("headline"))]
    if not sizes:
        return None
    size = sizes[-1]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    drawn = False
    for name in ("wait", "overlap", "off"):
        cycles = dig(variants, name, "sizes", size, "cycles") or []
        window = next((c.get("window") for c in cycles if isinstance(c, dict) and c.get("window")), None)
        if not window:
            continue
        # Each pass as a segment from its start to its end, at the height of its duration.
        color = {"wait": "C0", "overlap": "C1", "off": "C2"}[name]
        ax.hlines([end - start for start, end in window], [start for start, _ in window],
                  [end for _, end in window], colors=color, linewidth=2.5, label=f"NVSHARE_PREFETCH={name}")
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.axvline(0, color="grey", linestyle="--", linewidth=1, label="B releases (t_rel)")
    ax.set_yscale("log")
    ax.set_xlabel("ms after B released (t_rel); each segment is one pass of A")
    ax.set_ylabel("pass duration ms (log)")
    ax.set_title(f"A's passes around a switch, {size} GiB", fontsize=10)
    ax.legend(fontsize=8, loc="center right")
    return fig


def plot(s: dict, plt) -> dict:
    return {"switch-cost.png": plot_switch(plt, s), "switch-timeline.png": plot_switch_timeline(plt, s)}


if __name__ == "__main__":
    raise SystemExit(main())
