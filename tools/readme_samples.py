"""README's samples of nvsharectl output, made by the code that prints them, so they cannot drift.

One fixed node (NODE: two GPUs, four clients, pids and times fixed) is put through the scheduling
policy (the GPUs' mode, operation and explanation are what an Arbiter says of those footprints)
and rendered by nvsharectl's own renderers (ctl_render.render_status, ctl_top.render_frame) at the
sizes README shows. README marks each sample with a comment naming it, the code block after it is
the sample:

    <!-- sample: status-80 (tools/readme_samples.py) -->

    python3 tools/readme_samples.py           # check: exit 1 with a diff when README differs
    python3 tools/readme_samples.py --write   # rewrite README's samples

tests/cli/test_readme_samples.py runs the check.
"""

from __future__ import annotations

import difflib
import io
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "src") not in sys.path:  # run from a checkout: this checkout's code
    sys.path.insert(0, str(REPO / "src"))

from rich.console import Console  # noqa: E402

from xpushare.cli.ctl_render import render_status  # noqa: E402
from xpushare.cli.ctl_top import Tracker, render_frame  # noqa: E402
from xpushare.scheduler.policy import Arbiter, Mode  # noqa: E402

GiB = 1 << 30
README = REPO / "README.md"
MARKER = re.compile(r"<!-- sample: (?P<name>[\w-]+) \(tools/readme_samples\.py\) -->\n+```\n"
                    r"(?P<body>.*?)```\n", re.S)
NOW = 1_780_000_000.0  # the frames' wall clock (top prints it as the local time: see frame())
GPUS = [("GPU-5f3c9e2a-7d41-4b8e-9a06-c2e1d7f0b3a4", "NVIDIA H100 80GB HBM3"),
        ("GPU-0b8d6a1f-2c39-4e75-8f1a-93d4e6b2c750", "NVIDIA H100 80GB HBM3")]
# (pid, GPU index, GiB, what it does: hold, wait or idle, held for s, command)
CLIENTS = [(4101, 0, 38, "hold", 42.0, "python3 train.py --epochs 3"),
           (4102, 0, 24, "hold", 7.0, "python3 serve.py --port 8000"),
           (4103, 0, 16, "wait", 0.0, "python3 finetune.py"),
           (4104, 1, 6, "idle", 0.0, "jupyter-lab")]


def _gpu_views() -> list[dict]:
    """What the policy says of each GPU: auto mode, the clients' footprints, their requests."""
    views = []
    for index, (uuid, name) in enumerate(GPUS):
        arb = Arbiter(Mode.AUTO, None, capacity=80 * GiB)
        for pid, gpu, gib, action, _, _ in CLIENTS:
            if gpu == index:
                arb.set_footprint(pid, gib * GiB, 0.0)
                if action != "idle":
                    arb.request(pid, 0.0)
        views.append({"index": index, "uuid": uuid, "name": name, **arb.describe(1.0),
                      "mode": arb.mode.value, "holders": list(arb.holders),
                      "queue": arb.queue})
    return views


def node() -> dict:
    """The status reply of the fixed node, as the scheduler's status op builds it."""
    views = _gpu_views()
    # GPU 0 has switched before: what the scheduler measured (the quantum is 19 times the cost).
    views[0].update(switch_cost=0.2, tq=3.8, last_switch={"drain": 0.003, "swap_out": 0.12,
                                                          "swap_in": 0.085, "ago": 12.0})
    held = {pid: held_for for pid, _, _, action, held_for, _ in CLIENTS if action == "hold"}
    gpus = [{"index": v["index"], "uuid": v["uuid"], "name": v["name"], "memory_total": 80 * GiB,
             "capacity": 80 * GiB, "mode": v["mode"], "operation": v["operation"], "why": v["why"],
             "used": v["used"], "tq": v["tq"], "tq_source": v["tq_source"],
             "switch_cost": v["switch_cost"], "last_switch": v.get("last_switch"),
             "holders": [{"pid": p, "client_id": p - 4100, "held_for": held[p], "dropping": False}
                         for p in v["holders"]],
             "queue": v["queue"], "resident_bytes": sum(
                 gib * GiB for _, gpu, gib, _, _, _ in CLIENTS if gpu == v["index"]),
             "swapped_bytes": 0} for v in views]
    state = {"hold": "holding", "wait": "waiting", "idle": "idle"}
    clients = [{"client_id": pid - 4100, "pid": pid, "uid": 1000, "priority": 0,
                "state": state[action], "job": None, "pod": None, "pod_hint": None,
                "quota": {}, "command": command,
                "gpus": [{"index": gpu, "uuid": GPUS[gpu][0], "state": state[action],
                          "managed_bytes": gib * GiB, "other_bytes": 0,
                          "resident_bytes": gib * GiB, "swapped_bytes": 0,
                          "gpu_busy_seconds": 0.0}]}
               for pid, gpu, gib, action, _, command in CLIENTS]
    return {"ok": True, "scheduler": {"version": "0.1.0", "pid": 4000,
                                      "socket": "/var/run/nvshare/scheduler.sock"},
            "gpus": gpus, "clients": clients}


def _text(out: io.StringIO) -> str:
    """Rendered lines without the padding rich puts after a table's title (editors strip it)."""
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())


def status(width: int, status_reply: dict | None = None) -> str:
    out = io.StringIO()
    render_status(status_reply or node(), file=out, width=width)
    return _text(out)


def frame(width: int, height: int | None = None, status_reply: dict | None = None) -> str:
    """One `nvsharectl top --once` frame; its clock line reads 12:00:00 wherever it is made."""
    out = io.StringIO()
    console = Console(file=out, width=width, highlight=False, markup=False, emoji=False)
    status_reply = status_reply or node()
    tracker = Tracker()
    tracker.update(status_reply, NOW)
    console.print(render_frame(status_reply, tracker, width, height, NOW))
    clock = re.compile(r"^\d\d:\d\d:\d\d  ", re.M)
    return clock.sub("12:00:00  ", _text(out), count=1)


SAMPLES = {"status-80": lambda: status(80), "top-80": lambda: frame(80)}


def check(text: str) -> tuple[str, list[str]]:
    """README's text with every sample as the code renders it, and the names of those that differ
    (a sample README marks but SAMPLES does not know is an error)."""
    differ = []

    def replace(m: re.Match) -> str:
        name = m.group("name")
        if name not in SAMPLES:
            raise KeyError(f"README names a sample tools/readme_samples.py does not make: {name}")
        body = SAMPLES[name]()
        if body != m.group("body"):
            differ.append(name)
        head = m.group(0)[:m.start("body") - m.start()]
        return f"{head}{body}```\n"
    return MARKER.sub(replace, text), differ


def main(argv: list[str]) -> int:
    text = README.read_text()
    new, differ = check(text)
    if "--write" in argv:
        README.write_text(new)
        print(f"README.md: rewrote {', '.join(differ) or 'nothing (all current)'}")
        return 0
    if differ:
        sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True),
                                                   "README.md", "README.md (rendered)"))
        print(f"README.md's samples {', '.join(differ)} differ from the code's output: "
              "python3 tools/readme_samples.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
