#!/usr/bin/env python3
"""Where the scheduler's event loop is held: run nvshare-scheduler under a watch that reports every
stretch of at least LOOPWATCH_MS (default 5) during which the loop did not turn, with where the loop
thread was, and every garbage collection that took that long.

    python3 -m bench.core.loopwatch -m xpushare.scheduler [scheduler options]

(bench/scheduling/soak.py --watch runs the daemon this way.) How: a callback on the loop stamps the time
every millisecond; a watcher thread looks every millisecond, and once the stamp is older than the
threshold it samples the loop thread's stack (the interpreter hands the watcher the GIL at least
every switch interval, 5 ms), then reports the stretch when the loop turns again: its length and
the stack seen most often in it, and how long the thread ran and how long it waited for a CPU
(/proc/self/task/TID/schedstat: a loop held by a busy machine, not by the scheduler, waited).
gc.callbacks time each collection. Lines go to stderr, which
bench/core/daemon.py keeps in the daemon's log, starting with "loopwatch:".

LOOPWATCH_CALLBACKS=1: instead of sampling, every callback the loop runs is timed (asyncio's
Handle._run), and each of at least LOOPWATCH_MS is reported with what it was (for a socket's read,
the peer's client id, pid and uid), its wall time and its thread's CPU time in it. Sampling can
only see the loop's thread where it lets the interpreter lock go (a send, a poll), so it names
the system call after a stretch of Python code; timing the callbacks names the callback. The steps
of the slicer's jobs (node/slicer.py) are timed too: each of at least LOOPWATCH_STEP_MS (default 1)
is reported with where the job's generator stopped (its innermost function and line), and so is
each job's done callback (the reply's send) of that long.
"""

from __future__ import annotations

import collections
import gc
import os
import runpy
import sys
import threading
import time
import traceback

THRESHOLD_S = float(os.environ.get("LOOPWATCH_MS", "5")) / 1e3
CALLBACKS = os.environ.get("LOOPWATCH_CALLBACKS") == "1"
STEP_S = float(os.environ.get("LOOPWATCH_STEP_MS", "1")) / 1e3
_stamp = [time.perf_counter()]


def _say(text: str) -> None:
    sys.stderr.write(f"loopwatch: {text}\n")
    sys.stderr.flush()


def _watch_gc() -> None:
    started: list[float] = []

    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            took = time.perf_counter() - started.pop()
            if took >= THRESHOLD_S:
                _say(f"gc generation {info['generation']} took {took * 1e3:.1f} ms "
                     f"({info['collected']} collected, {len(gc.get_objects(2))} objects in the oldest)")
    gc.callbacks.append(callback)


def _schedstat(native_id: int) -> tuple[int, int]:
    """(ns the thread ran on a CPU, ns it waited runnable for one), from /proc."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat") as f:
            ran, waited = f.read().split()[:2]
        return int(ran), int(waited)
    except (OSError, ValueError):
        return 0, 0


def _watcher(loop_thread: int, native_id: int) -> None:
    stacks: collections.Counter = collections.Counter()
    held_since = None
    sched = (0, 0)
    while True:
        time.sleep(0.001)
        now, stamp = time.perf_counter(), _stamp[0]
        if now - stamp >= THRESHOLD_S:
            if held_since is None:
                sched = _schedstat(native_id)
            held_since = stamp
            frame = sys._current_frames().get(loop_thread)
            if frame is not None:
                stacks["".join(traceback.format_stack(frame, limit=12)[-8:])] += 1
        elif held_since is not None:
            held = (stamp - held_since) if stamp > held_since else now - held_since
            top = stacks.most_common(1)[0][0] if stacks else "(no sample)\n"
            ran, waited = (b - a for a, b in zip(sched, _schedstat(native_id)))
            if (ran + waited) / 1e9 < (held - THRESHOLD_S) / 2:
                # Mostly asleep in the loop's poll: a late heartbeat, nothing held the loop.
                held_since, stacks = None, collections.Counter()
                continue
            _say(f"loop held {held * 1e3:.1f} ms (from the hold's first sample: its thread ran "
                 f"{ran / 1e6:.1f} ms, waited for a CPU {waited / 1e6:.1f} ms); it was at:\n"
                 f"{top}".rstrip())
            held_since, stacks = None, collections.Counter()


def _what(handle) -> str:
    """A callback, and for a transport's the connection it serves."""
    cb = getattr(handle, "_callback", None)
    name = getattr(cb, "__qualname__", repr(cb))
    conn = getattr(getattr(getattr(cb, "__self__", None), "_protocol", None), "conn", None)
    if conn is not None:
        name += f" of client {conn.id} pid {conn.pid} uid {conn.uid}"
    return name


def _time_callbacks() -> None:
    """Every callback of THRESHOLD_S or more, reported (LOOPWATCH_CALLBACKS)."""
    from asyncio import events

    run = events.Handle._run

    def timed(self):
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return run(self)
        finally:
            took = time.perf_counter() - t0
            if took >= THRESHOLD_S:
                _say(f"callback took {took * 1e3:.1f} ms (ran {(time.thread_time() - c0) * 1e3:.1f}"
                     f" ms on a CPU): {_what(self)}")
    events.Handle._run = timed
    _time_steps()


def _where(gen) -> str:
    """Where a generator, and the ones it delegates to (yield from), stopped."""
    while getattr(gen, "gi_yieldfrom", None) is not None:
        gen = gen.gi_yieldfrom
    frame = getattr(gen, "gi_frame", None)
    return f"{gen.gi_code.co_name}:{frame.f_lineno if frame is not None else 'end'}"


def _time_steps() -> None:
    """Every step of a sliced job, and every job's done callback, of STEP_S or more."""
    from xpushare.scheduler.node import slicer

    def timed_steps(gen):
        while True:
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                next(gen)
            except StopIteration as finished:
                _step_took(t0, c0, f"{gen.gi_code.co_name}'s last step")
                return finished.value
            _step_took(t0, c0, f"a step to {_where(gen)}")
            yield

    def timed_done(done):
        def call(result):
            t0, c0 = time.perf_counter(), time.thread_time()
            done(result)
            _step_took(t0, c0, f"a job's done callback ({len(result or b'')} bytes)")
        return call

    submit = slicer.Slicer.submit

    def timed_submit(self, loop, gen, done, urgent=False):
        return submit(self, loop, timed_steps(gen), timed_done(done), urgent)
    slicer.Slicer.submit = timed_submit


def _step_took(t0: float, c0: float, what: str) -> None:
    took = time.perf_counter() - t0
    if took >= STEP_S:
        _say(f"slicer: {what} took {took * 1e3:.2f} ms (ran {(time.thread_time() - c0) * 1e3:.2f} ms)")


def _beat(loop) -> None:
    _stamp[0] = time.perf_counter()
    loop.call_later(0.001, _beat, loop)


def main() -> None:
    if sys.argv[1:2] != ["-m"] or len(sys.argv) < 3:
        sys.exit(__doc__)
    module = sys.argv[2]
    sys.argv = [module, *sys.argv[3:]]
    from xpushare.scheduler.shell import server

    startup = server.Server.startup

    async def watched_startup(self) -> None:
        import asyncio
        await startup(self)
        if CALLBACKS:
            _time_callbacks()
            _say(f"timing the loop's callbacks of {THRESHOLD_S * 1e3:g} ms or more")
            return
        _beat(asyncio.get_running_loop())
        threading.Thread(target=_watcher, args=(threading.get_ident(), threading.get_native_id()),
                         daemon=True).start()
        _say(f"watching for loop holds of {THRESHOLD_S * 1e3:g} ms or more")

    server.Server.startup = watched_startup
    _watch_gc()
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
