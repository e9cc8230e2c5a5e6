"""CPUs set apart for a benchmark's programs: a whole physical core each (both of its hardware
threads), so that a program's timings do not depend on what the machine's scheduler places on the
other thread of its core (a spinning synchronize there slows every instruction here)."""

from __future__ import annotations

import os
from pathlib import Path

SYS_CPU = Path("/sys/devices/system/cpu")


def physical_cores(allowed: set[int] | None = None, sys_cpu: Path = SYS_CPU) -> list[list[int]]:
    """The allowed CPUs grouped by physical core (each group's hardware threads), in CPU order;
    a CPU whose topology cannot be read is a core of its own."""
    allowed = os.sched_getaffinity(0) if allowed is None else allowed
    cores: dict[tuple, list[int]] = {}
    for cpu in sorted(allowed):
        topo = sys_cpu / f"cpu{cpu}" / "topology"
        try:
            key = ((topo / "physical_package_id").read_text().strip(),
                   (topo / "core_id").read_text().strip())
        except OSError:
            key = ("cpu", str(cpu))
        cores.setdefault(key, []).append(cpu)
    return sorted(cores.values())


def set_apart(roles: list[str], allowed: set[int] | None = None,
              sys_cpu: Path = SYS_CPU) -> dict[str, list[int]] | None:
    """roles -> the CPUs of a physical core of its own, and "rest" -> the other allowed CPUs (the
    first core, where interrupts tend to go, is never given to a role). None where the machine has
    too few cores for that."""
    cores = physical_cores(allowed, sys_cpu)
    if len(cores) < len(roles) + 2:
        return None
    out = {role: cores[1 + i] for i, role in enumerate(roles)}
    out["rest"] = [c for core in cores[:1] + cores[1 + len(roles):] for c in core]
    return out
