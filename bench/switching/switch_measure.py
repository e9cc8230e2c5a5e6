"""The measurement of the switch-cost benchmark (bench/switching/switch_cost.py): how long a client whose W GiB
were evicted to host takes to be back at full speed, with bulk moves (NVSHARE_PREFETCH=wait,
=overlap: the swap store's copies) and with demand faults (=off, also NVSHARE_SWAP=off: the driver's
migration out, page faults back); judged against a pinned host-to-device copy of W GiB made natively.

(long: one measurement with its method written out here; the benchmark's report lives in
switch_cost.py and A's process in switch_worker.py already.)

A (a PyTorch process under libnvshare.so: bench/switching/switch_worker.py) holds W GiB in one float32 tensor
and loops passes `x.add_(1.0); torch.cuda.synchronize()`, recording (t_start, t_end) of every pass
with time.monotonic() (CLOCK_MONOTONIC: one clock for every process of the machine). Scheduler: mode
auto, explicit --tq (60 s), a virtual capacity (--gpu-memory) of max(W) + 6 GiB and an explicit
--reserve. Once A is steady, B (bench/core/protoclient.py, not a GPU process; priority 10 > A's 0)
attaches A's GPU, reports a footprint that fits alone but not beside A (capacity - reserve - A's
footprint / 2) and asks for the lock: the scheduler preempts A with DROP_LOCK EVICT, A drains, moves
its W GiB to host in bulk (before its release, by default: NVSHARE_EVICT=wait); B gets LOCK_OK, keeps the GPU
max(0.3 s, 0.25 s per GiB) as a real holder keeps it for part of a quantum (room for the move where it
runs after the release, NVSHARE_EVICT=background), notes t_rel and releases; A is granted again with PREFETCH. The switch cost is the end of A's first pass that ends after t_rel,
minus t_rel: that pass touches all W GiB, so it ends when the data is back (plus one ordinary pass).
Also per cycle: B's wait (A's drain + eviction + two scheduler hops), the time until a pass is back
within 25% of the steady pass time, and the scheduler's log of the switch (drop evict=yes|no,
release drain/evict/prefetch ms, grant prefetch=yes|no).

One A process per variant covers every size (allocate, measure, free, next size), so PyTorch starts
three times. Each B cycle runs --cycles times per size (A steady again in between); medians are
reported. After each size A checks that every element equals its number of passes: the data
survived every eviction and prefetch.

GPU safety: one A process at a time holds at most max(W) GiB (default 8, at most 16 allowed) plus
its CUDA context; NVSHARE_GPU_MEMORY equals the scheduler's capacity; nothing starts when the GPU has
less than 48 GiB free; A is ended whatever happens.

measure(...) returns {"parameters", "variants": {variant: {"sizes": {"8": {"switch_ms",
"handoff_ms", "recovered_ms", "steady_pass_ms", "evict_ms", "drain_ms", "prefetch_ms", "cycles":
[...], "data_ok"}}, "error"?}}, "headline": {"8": {"wait_ms", "overlap_ms", "off_ms",
"demand_vs_wait", "demand_vs_overlap", "demand_vs_bulk", "faster_bulk", "copy_ms", "bulk_vs_copy",
"goal_met"}}, "seconds"}; copy_ms and the goal come with headline(variants, copy_ms_per_gib).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Callable

BENCH = Path(__file__).resolve().parents[1]  # bench/

from bench.core.schedlog import duration_s, ms  # noqa: E402
from bench.switching.switch_worker import GIB, MIB, Progress, size_key  # noqa: E402
from bench.core.stats import median  # noqa: E402

VARIANTS = ("wait", "off", "overlap")  # the ones the headline needs first, if time runs short
DEFAULT_SIZES = (1.0, 4.0, 8.0)
MAX_SIZE_GIB = 16.0            # GPU safety: all processes under the library stay <= 24 GiB
HEADROOM_GIB = 6.0             # capacity = max(W) + this
RESERVE = 512 * MIB            # --reserve of the scheduler: B's footprint is computed from it
# A switch back is the swap-in plus the scheduler's grant and one ordinary pass over W GiB (about 1/40
# of the copy at HBM speed): within 25% of a pinned copy of W GiB is the bus's speed.
GOAL_VS_COPY = 1.25
B_PRIORITY = 10
RECOVERED_WITHIN = 1.25        # "full speed": a pass within 25% of the steady pass time
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


HOLD_S_PER_GIB = 0.25  # B's hold: room for A's move to host where it runs after the release (NVSHARE_EVICT=background)


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
    """The medians of a size's cycles after its first: a size's tensor is new, so its first
    swap-out goes by the driver's migration while the library pins its host copy (docs/swapping.md,
    "cold"), and only the cycles after it show the switch a client sees from then on. The first is
    kept apart (cold_switch_ms); with one cycle only, it is all there is (cold_counted)."""
    ok = [c for c in cycles if "error" not in c]
    warm = ok[1:] or ok
    return {
        "switch_ms": median([c["switch_ms"] for c in warm]),
        "switch_ms_all": [round(c["switch_ms"], 3) for c in ok],
        "cold_switch_ms": ok[0]["switch_ms"] if len(ok) > 1 else None,
        "cold_counted": len(ok) == 1,
        "handoff_ms": median([c["handoff_ms"] for c in warm]),
        "recovered_ms": median([c.get("recovered_ms") for c in warm]),
        "steady_pass_ms": steady_s * 1e3 if steady_s else None,
        "evict_ms": median([c.get("evict_ms") for c in warm]),
        "drain_ms": median([c.get("drain_ms") for c in warm]),
        "prefetch_ms": median([c.get("prefetch_ms") for c in warm]),
        "evict_flags": [c.get("evict_flag") for c in ok],
        "regrant_prefetch": [c.get("regrant_prefetch") for c in ok],
        "cycles": cycles,
        "passes": passes,
        "data_ok": data_ok,
    }


def headline(variants: dict, copy_ms_per_gib: float | None = None) -> dict:
    """Per size: each variant's median switch, demand / bulk ratios, the faster bulk variant, and with
    the pinned copy's time per GiB (measured natively), the faster bulk variant over that copy."""
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
        row["copy_ms"] = copy_ms_per_gib * float(key) if copy_ms_per_gib else None
        best = bulks.get(row["faster_bulk"]) if row["faster_bulk"] else None
        row["bulk_vs_copy"] = best / row["copy_ms"] if best and row["copy_ms"] else None
        row["goal_met"] = None if row["bulk_vs_copy"] is None else row["bulk_vs_copy"] <= GOAL_VS_COPY
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
    """A as it is measured: bench/switching/switch_worker.py, a PyTorch process under libnvshare.so."""
    def command(variant: str, sizes: list[float], ctrl: Path, warm_passes: int, sock: Path,
                capacity: int) -> tuple[list, dict]:
        from bench.core.common import harness

        # Demand faults are the driver's own paging: without the swap store, whose copies would
        # otherwise bring the memory back at the grant whatever NVSHARE_PREFETCH says.
        demand = {"NVSHARE_SWAP": "off"} if variant == "off" else {}
        env = harness.library_env(lib, sock, gpu_memory=f"{capacity // MIB}MiB", NVSHARE_PREFETCH=variant,
                                  NVSHARE_PRIORITY=0, **demand, **({"NVSHARE_DEBUG": 1} if debug else {}))
        argv = harness.python_cmd(BENCH / "switching" / "switch_worker.py", "--sizes",
                                  ",".join(size_key(w) for w in sizes), "--control", ctrl,
                                  "--warm-passes", warm_passes)
        return argv, env
    return command


class VariantRun:
    """One A process (one NVSHARE_PREFETCH variant) and B's cycles against it, size by size."""

    def __init__(self, sched, b_holder: dict, variant: str, sizes: list[float], cycles: int,
                 capacity: int, ctrl: Path, warm_passes: int, steady_passes: int,
                 deadline: float | None, a_command: ACommand) -> None:
        from bench.core.common import harness

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
        from bench.core.protoclient import ProtoClient, client_gpus, ctl

        if self.b_holder.get("client") is None:
            gpus = _wait(lambda: client_gpus(ctl(self.sched.socket, "status"), a_pid), 30,
                         "A to attach its GPU", self.alive, interval=0.05)
            b = ProtoClient(self.sched.socket, priority=B_PRIORITY, timeout=30)
            attached = b.attach(gpus[0]["uuid"], capacity=self.capacity, name="switch_cost B")
            self.b_holder.update(client=b, uuid=gpus[0]["uuid"], capacity=attached.capacity or self.capacity)
        return self.b_holder["client"]

    def _a_footprint(self, a_pid: int, w: float) -> int:
        """A's footprint as the scheduler sees it once the size's allocation has been reported."""
        from bench.core.protoclient import client_gpus, ctl, footprint

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
                    # for A's move to host to finish where it runs after the release
                    # (NVSHARE_EVICT=background), so that A comes back to data that is really on the host.
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
    from bench.core.common import harness
    from bench.core.protoclient import children_can_import_xpushare

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
