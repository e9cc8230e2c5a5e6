"""--move-suspended: a suspended client whose application wants to run (RESUME_REQ) while its GPU
has no room for it is restored on another GPU of its chip type that has, as `nvsharectl move`
moves it (node/move.py). Which GPU is placement.py's choice (new_home), from the loads the `place`
op reads; a client that stays is resumed as before (node/suspend.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..node import move
from . import placement
from .ops import gpu_loads

if TYPE_CHECKING:
    from ..node.registry import Gpu
    from ..node.state import SchedulerState
    from ..shell.connection import Conn


def new_home(state: SchedulerState, conn: Conn) -> Gpu | None:
    """The GPU of conn's chip type it should be restored on instead of its own, or None."""
    gpus = conn.gpus()
    if len(gpus) != 1:
        return None
    source = next(iter(gpus))
    loads = {g.uuid: g for g in gpu_loads(state)}
    same = [loads[g.uuid] for g in state.registry.in_order()
            if g.uuid in loads and g.name and g.name == source.name]
    # its share of its GPU's load: its memory and, as the arbiter counts every client, a context
    need = move.room_needed(conn, source)
    home = placement.new_home(same, loads[source.uuid], need, need)
    target = home and state.registry.get(home.uuid)
    return target if target is not None and move.why_not(state, conn, target) is None else None


def moved_instead(state: SchedulerState, conn: Conn) -> bool:
    """conn's application asked to run: whether it is moved (and so restored) elsewhere."""
    if not state.config.move_suspended or conn.suspend.phase != "suspended" or conn.suspend.move:
        return False
    target = new_home(state, conn)
    return target is not None and move.order(state, conn, target, "--move-suspended: its GPU is full") is None
