"""The verdicts and the report of bench/multigpu/gang_ddp.py: its rows of the headline table and its section."""

from __future__ import annotations

import re

from bench.core.render import error_of, error_row, f, goal_row, num, yes_no

GOAL_AUTO_RATIO = 1.05  # the auto pair's wall over the native pair's, at most
# The arbiter's forced eviction (a client that did not release in time loses its connection). A
# "drop ... evict=yes" line is a memory swap-out at a turn, not this.
EVICT_RE = re.compile(r"\bevict pid=\d+")
DROP_RE = re.compile(r"\bdrop pid=\d+")
PHASES = (("native_pair", "side by side, natively"), ("serial", "under the library, mode serial"),
          ("auto", "under the library, mode auto"))


def evict_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if EVICT_RE.search(line)]


def compare(job: dict, reference: dict | None) -> dict:
    """Whether a job's losses and final parameters are bitwise those of the reference job alone:
    {"same_losses", "same_params", "first_difference" (a step, or None)}; None where either is
    missing."""
    losses, ref = job.get("losses"), (reference or {}).get("losses")
    if not isinstance(losses, list) or not isinstance(ref, list):
        return {"same_losses": None, "same_params": None, "first_difference": None}
    first = next((i for i, (a, b) in enumerate(zip(losses, ref)) if a != b), None)
    if first is None and len(losses) != len(ref):
        first = min(len(losses), len(ref))
    sha = job.get("params_sha256")
    return {"same_losses": first is None, "first_difference": first,
            "same_params": None if sha is None else sha == reference.get("params_sha256")}


def judge(result: dict) -> dict:
    """The goals: in serial mode both jobs finish, with the losses and parameters of the job alone,
    and no forced eviction; in auto mode the pair's wall over the native pair's (<= GOAL_AUTO_RATIO)."""
    alone = result.get("alone") or {}
    serial = result.get("serial") or {}
    jobs = serial.get("jobs") or []
    finished = bool(jobs) and all(j.get("returncode") == 0 and j.get("losses") for j in jobs)
    same = [compare(j, alone) for j in jobs]
    identical = finished and all(c["same_losses"] and c["same_params"] for c in same)
    evictions = serial.get("evictions")
    native = num((result.get("native_pair") or {}).get("wall_s"))
    auto = result.get("auto") or {}
    auto_ok = bool(auto.get("jobs")) and all(j.get("returncode") == 0 for j in auto["jobs"])
    wall = num(auto.get("wall_s")) if auto_ok else None
    ratio = wall / native if wall is not None and native else None
    return {"serial_finished": finished, "serial_same_as_alone": identical,
            "serial_no_eviction": None if evictions is None else evictions == 0,
            "auto_same_as_alone": auto_ok and all(compare(j, alone)["same_losses"] for j in auto["jobs"]),
            "auto_ratio": ratio, "auto_met": None if ratio is None else ratio <= GOAL_AUTO_RATIO}


def all_met(result: dict) -> bool:
    v = result.get("verdict") or judge(result)
    return bool(v["serial_finished"] and v["serial_same_as_alone"] and v["serial_no_eviction"]
                and v["auto_met"])


def goals(section: dict) -> list[str]:
    what = "gang-scheduled DDP jobs"
    if error_of(section):
        return [error_row(what, error_of(section))]
    v = section.get("verdict") or judge(section)
    p = section.get("parameters") or {}
    serial = section.get("serial") or {}
    tq = f"serial, TQ {p.get('tq', '?')} s"
    jobs = serial.get("jobs") or []
    done = sum(1 for j in jobs if j.get("returncode") == 0)
    return [
        goal_row(f"two DDP jobs ({p.get('nproc', '?')} ranks each), {tq}: both finish",
                 f"**{done} of {len(jobs)}**", "—", "—", "both", v.get("serial_finished")),
        goal_row(f"two DDP jobs, {tq}: losses and parameters", "bitwise compared",
                 "the job alone, natively", "—", "identical", v.get("serial_same_as_alone")),
        goal_row(f"two DDP jobs, {tq}: forced evictions", f"**{serial.get('evictions', '—')}**",
                 "—", "—", "0", v.get("serial_no_eviction")),
        goal_row("two DDP jobs, auto: wall of the pair", f"{f(section.get('auto', {}).get('wall_s'), 1)} s",
                 f"{f(section.get('native_pair', {}).get('wall_s'), 1)} s (side by side, natively)",
                 f"**{f(v.get('auto_ratio'), 3)}x**", f"<= {GOAL_AUTO_RATIO:g}x", v.get("auto_met")),
    ]


def _job_row(label: str, job: dict, alone: dict) -> str:
    # A pair's jobs carry their comparison (their loss lists are not kept); the reference has none.
    c = job if "same_losses" in job else {"same_losses": None, "same_params": None}
    status = "ok" if job.get("returncode") == 0 else \
        ("timed out" if job.get("timed_out") else f"exit {job.get('returncode')}")
    return (f"| {label} | {job.get('run_id', '—')} | {status} | {f(job.get('wall_s'), 1)} | "
            f"{f(job.get('seconds'), 1)} | {f(job.get('final_loss'), 6)} | "
            f"{yes_no(c['same_losses'])} / {yes_no(c['same_params'])} |")


def section(s: dict) -> str:
    if error_of(s):
        return f"Not measured: `{error_of(s)}`\n"
    p = s.get("parameters") or {}
    v = s.get("verdict") or judge(s)
    alone = s.get("alone") or {}
    lines = [
        f"Two torchrun jobs of examples/ddp_train.py ({p.get('nproc', '?')} ranks each, backend "
        f"{alone.get('backend', p.get('backend') or '?')}, {p.get('steps', '?')} steps, fp32), all "
        "ranks on the GPU(s) the machine has. The scheduler grants a job's ranks together (gang "
        "scheduling, the job identified by TORCHELASTIC_RUN_ID and its rendezvous) so that a rank "
        "never waits in a collective for a peer that waits for the lock. Each job's losses (every "
        "step's, on rank 0) and final parameters (sha256) are compared bit for bit with the job "
        "alone, natively.\n",
        "| run | job | result | wall (s) | training (s) | final loss | same losses / params as alone |",
        "|---|---|---|---:|---:|---:|---|",
        _job_row("alone, natively (reference)", alone, alone),
    ]
    for key, label in PHASES:
        for job in (s.get(key) or {}).get("jobs") or []:
            lines.append(_job_row(label, job, alone))
    lines.append("")
    lines.append("| pair | wall of the pair (s) | over side by side natively |")
    lines.append("|---|---:|---:|")
    native = num((s.get("native_pair") or {}).get("wall_s"))
    for key, label in PHASES:
        wall = num((s.get(key) or {}).get("wall_s"))
        lines.append(f"| {label} | {f(wall, 1)} | "
                     f"{f(wall / native if wall is not None and native else None, 3)}x |")
    serial = s.get("serial") or {}
    lines += ["", f"Serial mode (TQ {p.get('tq', '?')} s): {serial.get('drops', '—')} drops (turns), "
              f"{serial.get('evictions', '—')} forced evictions. Auto mode over the native pair: "
              f"**{f(v.get('auto_ratio'), 3)}x** (goal <= {GOAL_AUTO_RATIO:g}x).\n"]
    for line in serial.get("evict_lines") or []:
        lines.append(f"    {line}")
    return "\n".join(lines) + "\n"
