#!/usr/bin/env python3
"""The library's added CPU cost per kernel launch, without a GPU (bench/launch/launch_overhead.py
measures it on the GPU, against the real driver; this one can run anywhere, and can compare the
library of two trees before a GPU is at hand).

cuda_app (tests/mock/cuda_app/) makes --launches cuLaunchKernel calls into the mock driver
(tests/mock/cuda/, whose launch only counts when nothing is logged), natively and under each library
given, one process per library per round, the order rotated every round; under a scheduler in mode
`off`, so the library holds the lock and takes its fast path, as on the GPU. Per process: the launch
step's own wall time over its launches (cuda_app's JSON: t - t0, after the context exists).
Reported per library: the median ns per launch over the rounds, with min and max, and the added ns
over the native process of the same round (median over rounds): the reference is the mock's own
function, which the library cannot see into.

    python3 -m bench.launch.launch_path_mock [--launches N] [--rounds R] [--library LABEL=PATH ...]
                                             [--json FILE]

Without --library: this tree's library (`pip install .` or the build the tests make). A library of
another tree, to compare: build it there (`cmake -S native -B build && make -C build`) and pass
`--library before=build/libnvshare.so --library now=...`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "src")]
from bench.core.stats import median  # noqa: E402
from testkit.scheduler import SchedulerProcess  # noqa: E402
from tests.interposer.harness import build_artifacts, clean_env  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--launches", type=int, default=1_000_000, help="per process (default 1000000)")
    p.add_argument("--rounds", type=int, default=9, help="processes per library (default 9)")
    p.add_argument("--library", action="append", default=[], metavar="LABEL=PATH",
                   help="a libnvshare.so to measure (repeatable; default: this tree's)")
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args(argv)
    if args.launches < 1000 or args.rounds < 1:
        p.error("--launches from 1000, --rounds from 1")
    try:
        args.libraries = dict(spec.split("=", 1) for spec in args.library) or {"this tree": _this_tree()}
    except ValueError:
        p.error("--library takes LABEL=PATH")
    for label, path in args.libraries.items():
        if label == "native" or not Path(path).is_file():
            p.error(f"--library {label}={path}: not a file (or the label 'native', which is the reference)")
    return args


def _this_tree() -> str:
    from xpushare.wire.paths import library_path
    return str(library_path())


def ns_per_launch(app: Path, env: dict, launches: int) -> float:
    out = subprocess.run([str(app), "--lookup", "linked", "init", "ctx", "0", "launch", str(launches)],
                         env=env, capture_output=True, text=True, timeout=120, check=True).stdout
    step = json.loads(out.strip().splitlines()[-1])
    assert step["step"] == "launch" and step["ret"] == 0, step
    return (step["t"] - step["t0"]) / launches


def measure(args: argparse.Namespace, work: Path) -> dict:
    art = build_artifacts(work / "mock")
    base = clean_env()  # none of the caller's library, mock or device settings
    sock = work / "s.sock"
    sched = SchedulerProcess(sock, ["--mode", "off", "--no-nvml"], env=base).start()
    envs = {"native": {**base, "LD_LIBRARY_PATH": str(art.dir)}}
    for label, path in args.libraries.items():
        envs[label] = {**envs["native"], "LD_PRELOAD": str(Path(path).resolve()), "NVSHARE_SOCK_PATH": str(sock)}
    rounds: list[dict[str, float]] = []
    try:
        labels = list(envs)
        for r in range(args.rounds):
            order = labels[r % len(labels):] + labels[:r % len(labels)]
            rounds.append({label: ns_per_launch(art.app, envs[label], args.launches) for label in order})
    finally:
        sched.stop()
    result = {"launches": args.launches, "rounds": rounds, "libraries": args.libraries, "summary": {}}
    for label in envs:
        each = [r[label] for r in rounds]
        added = [r[label] - r["native"] for r in rounds]
        result["summary"][label] = {"ns_per_launch": median(each), "min": min(each), "max": max(each),
                                    "added_ns": median(added) if label != "native" else 0.0}
    return result


def table(result: dict) -> str:
    lines = [f"{result['launches']} launches per process, {len(result['rounds'])} rounds (mock driver)",
             f"{'':<14}{'ns/launch':>11}{'min':>9}{'max':>9}{'added ns':>11}"]
    for label, s in result["summary"].items():
        added = "-" if label == "native" else f"{s['added_ns']:+.1f}"
        lines.append(f"{label:<14}{s['ns_per_launch']:>11.1f}{s['min']:>9.1f}{s['max']:>9.1f}{added:>11}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="launch-path-") as tmp:
        result = measure(args, Path(tmp))
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
