"""The benchmarks of the suite, in the order they run, and the interface each module implements.

A benchmark is one module of bench/ that runs, judges and renders itself:

    NAME: str                       its key in the results (and its --only name)
    TITLE: str                      its section's title in docs/benchmarks.md
    SHARE, MIN_S: float             its seconds of the default budget; below MIN_S left it is skipped
    GPU: bool                       needs the GPU (the safety check runs before it)
    RERUN: str                      the command that reruns it alone
    DEFAULT: bool                   optional, default True: part of the suite when no --only is given
    run(quick, time_left) -> dict   measure; the dict (parameters, raw samples, headline numbers) is
                                    stored in the results as it is
    goals(result) -> [str]          optional: its rows of a headline table (render.GOAL_HEAD), one per
                                    goal or figure, an error row when it has no result
    section(result) -> str          the Markdown of its section (run_all and report add the title, the
                                    time it took, the plots, the parameters and the rerun command)
    PLOTS: {file: title}            optional, with plot(result, plt) -> {file: matplotlib figure or None}

bench/run_all.py runs them (each in a child process of its own, sharing the budget); bench/core/report.py
assembles docs/benchmarks.md from their goals and sections. Both import the modules named here.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

SUITE = ("train_overhead", "launch_overhead", "sched_latency", "switch_cost", "makespan_fit", "makespan_pair",
         "interactive", "idle_release", "load", "soak", "busy_accuracy", "quota_limits", "gang_ddp")
GOALS = ("makespan_fit", "makespan_pair", "switch_cost", "interactive")  # the headline table, in this order
OTHER = ("sched_latency", "train_overhead", "launch_overhead",  # "other measurements", when they ran
         "busy_accuracy", "quota_limits", "gang_ddp")
# The benchmarks without a GPU that are not part of the GPU suite's run (DEFAULT False): they load the
# scheduler with many clients and with fuzz, which tells about the CPU, not the GPU. `run_all.py --only
# load,soak` runs them on any machine into bench/results/cpu.json, which the report shows in a part of its
# own, with that machine's CPU.
CPU = ("load", "soak")

BENCH = Path(__file__).resolve().parents[1]


def module(name: str) -> ModuleType:
    """A benchmark's module by its NAME: bench.<room>.<name>, the room found from the files."""
    found = [p.parent.name for p in BENCH.glob(f"*/{name}.py") if p.parent.name != "probes"]
    if len(found) != 1:
        raise ModuleNotFoundError(f"no benchmark named {name!r} in one room of {BENCH}")
    return importlib.import_module(f"bench.{found[0]}.{name}")


def modules(names: tuple[str, ...] = SUITE) -> list[ModuleType]:
    return [module(name) for name in names]
