"""The status reply, built and encoded a slice at a time so that it never holds the event loop.

Built in one piece, its cost grows with clients x GPUs, and no lock is granted meanwhile. So the
reply is a generator (steps): it yields after each GPU, client, job or encoded piece, and
slicer.Slicer runs the generators of every pending request one slice at a time, so lock messages
are read and answered between two slices whatever the number of requests. Each piece is encoded to JSON as it is made; the frame is joined
from them at the end (a copy of at most MAX_CTL_REPLY bytes).

What a requester sees is access.Viewer's: an admin every client; anyone else only the clients of
its own uid in its own pod (or in no pod, as it is), and every other client counted
(`other_users_clients`, in the reply and per GPU with the bytes they told: `other_users_bytes`),
as a container's nvidia-smi shows only its own processes. So a non-admin's reply grows with its own clients, not with everyone's: twenty users
asking for status cannot each make the scheduler build, and themselves parse, the whole node.

A reply is one frame, so what it lists is bounded: with very many clients their command lines are
shortened; with very many client-made GPUs only those that fit are listed (`gpus_not_listed`, in the
reply and in each client); and if the clients still do not fit, the last ones are left out
(`clients_not_listed`). The GPUs, clients and jobs are those of the moment each is built: a client
gone by the time its turn comes is not listed.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Generator

from ... import __version__
from ...wire.protocol import MAX_CTL_REPLY, MessageType, frame_pieces
from ..node import swap
from ..node.access import Viewer
from ..node.state import SchedulerState
from .status import COMMAND_MAX, client_status, gpu_status, job_shown, job_status

COMMAND_SHORT = 32  # characters of a command line when the reply would not fit otherwise
REPLY_MAX = MAX_CTL_REPLY - 256  # what status fills of a frame, below it: the counts added last
JOIN_CLIENTS = 16  # client entries joined into the reply's bytes in one step
OTHERS_STEP = 16   # other tenants' clients counted in one step

Steps = Generator[None, None, list[bytes]]  # the frame's pieces (wire.protocol.frame_pieces)


def _dump(value) -> str:
    return json.dumps(value, separators=(",", ":"))


def steps(state: SchedulerState, viewer: Viewer) -> Steps:
    """The CTL_REPLY frame of a status request, a step at a time. Each GPU's, client's and job's
    entry is encoded in the step that builds it, and only its text is kept: entries kept as dicts
    from one slice to the next would be promoted by the collector and make it run full
    collections over the whole daemon while status requests keep coming."""
    registry = state.registry
    now = registry.now()
    clients = state.clients()
    yield
    swapped = swap.swapped_by_gpu(clients)
    others = None
    if not viewer.admin:
        clients, others = yield from _own_and_others(clients, viewer)
    gpus = registry.in_order()
    gpu_entry = functools.partial(_gpu_entry, now=now, swapped=swapped, viewer=viewer, others=others)
    gpu_t = []
    for g in gpus:
        gpu_t.append(_dump(gpu_entry(g)))
        yield
    shown: list = []
    client_t = yield from _clients(state, clients, now, viewer, shown=shown)
    job_t = []
    for job in list(registry.gangs.jobs.values()):
        if job_shown(job):
            job_t.append(_dump(job_status(job, viewer)))
            yield
    head = {"ok": True, "scheduler": {
        "pid": os.getpid(), "uid": os.geteuid(), "version": __version__,
        "socket": str(state.config.socket_path), "mode": registry.default_mode.value,
        "tq": registry.default_tq if registry.default_tq is not None else "auto"}}
    if others is not None:
        head["other_users_clients"] = others.total
    fixed = len(_dump(head)) + 64 + sum(map(len, job_t)) + len(job_t)

    def size() -> int:
        return fixed + sum(map(len, gpu_t)) + len(gpu_t) + sum(map(len, client_t)) + len(client_t)

    if size() > REPLY_MAX:
        client_t = yield from _clients(state, shown, now, viewer, COMMAND_SHORT)
    # Rare (hundreds of client-made GPUs): the entries as dicts again, to leave out the GPUs that
    # do not fit. Only then: dicts held over hundreds of steps are promoted to the collector's
    # oldest generation and set off full collections of the daemon's state, and a node of NVML's
    # GPUs too large for a frame (255 clients on 20 GPUs) has no GPU to leave out.
    if size() > REPLY_MAX and any(g.index is None for g in gpus):
        gpu_d = []
        for g in gpus:
            gpu_d.append(gpu_entry(g))
            yield
        client_d = []
        for c in shown:
            client_d.append(client_status(state, c, now, viewer, COMMAND_SHORT))
            yield
        yield from _list_made_up_gpus_that_fit(head, gpu_d, client_d, fixed)
        gpu_t = yield from _texts(head.pop("_gpus"))
        client_t = yield from _texts(client_d)
    left_out, total = 0, size()
    while client_t and total > REPLY_MAX:  # bounded whatever the number of connections
        total -= len(client_t.pop()) + 1
        left_out += 1
    if left_out:
        head["clients_not_listed"] = left_out
    return (yield from _frame(head, gpu_t, client_t, job_t))


def _frame(head: dict, gpu_t: list[str], client_t: list[str], job_t: list[str]) -> Steps:
    """The reply's frame from the entries' texts, joined and encoded JOIN_CLIENTS clients a step:
    at once, megabytes of text took some ms. Its pieces, not joined: joining 2 MB took 1.6-1.8 ms
    of CPU on the 2-core machine, and the connection writes them a piece a step (Conn.send_pieces)."""
    chunks = [(_dump(head)[:-1] + ',"gpus":[' + ",".join(gpu_t) + '],"clients":[').encode()]
    for start in range(0, len(client_t), JOIN_CLIENTS):
        yield
        text = ",".join(client_t[start:start + JOIN_CLIENTS])
        chunks.append((("," if start else "") + text).encode())
    chunks.append(('],"jobs":[' + ",".join(job_t) + "]}").encode())
    yield
    return frame_pieces(MessageType.CTL_REPLY, chunks)


def _gpu_entry(g, now: float, swapped: dict, viewer: Viewer, others: _Others | None) -> dict:
    entry = gpu_status(g, now, swapped.get(g.uuid, 0), viewer)
    if others is not None:  # a non-admin's: other users' clients on it, counted
        entry["other_users_clients"], entry["other_users_bytes"] = others.get(g.uuid, (0, 0))
    return entry


class _Others(dict):
    """uuid -> (other users' clients attached to that GPU, the bytes they told it); .total: other
    users' clients in all."""
    total = 0


def _own_and_others(clients: list, viewer: Viewer) -> Generator:
    """The viewer's own clients, and the others counted (_Others), OTHERS_STEP clients a step."""
    own, others = [], _Others()
    for i, c in enumerate(clients):
        if viewer.sees(c):
            own.append(c)
            continue
        others.total += 1
        for g in c.gpus():
            n, b = others.get(g.uuid, (0, 0))
            managed, other = c.memory.get(g.uuid, (0, 0))
            others[g.uuid] = (n + 1, b + managed + other)
        if i % OTHERS_STEP == OTHERS_STEP - 1:
            yield
    return own, others


def _clients(state: SchedulerState, clients: list, now: float, viewer: Viewer,
             command_max: int = COMMAND_MAX, shown: list | None = None) -> Generator:
    """The clients' entries as text, a client a step, leaving out those gone meanwhile (and
    listing the others in `shown`)."""
    out = []
    for c in clients:
        if c.closed or c not in state.conns:
            continue  # gone since the request came
        if shown is not None:
            shown.append(c)
        out.append(_dump(client_status(state, c, now, viewer, command_max)))
        yield
    return out


def _texts(items: list[dict]) -> Generator[None, None, list[str]]:
    out = []
    for item in items:
        out.append(_dump(item))
        yield
    return out


def _list_made_up_gpus_that_fit(head: dict, gpus: list, clients: list, fixed: int) -> Generator:
    """Keep NVML's GPUs, and the client-made ones (index null) in order while they fit in the
    frame with the clients' entries for them; say how many are left out (`gpus_not_listed`, in the
    reply and in each client). The counts start at their largest, so the reply only shrinks. The
    GPUs kept go to head["_gpus"]."""
    made = [g for g in gpus if g["index"] is None]
    kept = [g for g in gpus if g["index"] is not None]
    head["gpus_not_listed"] = len(made)
    entries: dict[str, list[tuple[dict, dict]]] = {}   # uuid -> (client, its entry for the GPU)
    room = REPLY_MAX - fixed - sum(len(_dump(g)) + 1 for g in kept)
    for c in clients:
        mine = [d for d in c["gpus"] if d["index"] is None]
        for d in mine:
            entries.setdefault(d["uuid"], []).append((c, d))
        c["gpus"] = [d for d in c["gpus"] if d["index"] is not None]
        c["gpus_not_listed"] = len(mine)
        room -= len(_dump(c)) + 1
        yield
    for g in made:
        pairs = entries.get(g["uuid"], [])
        cost = len(_dump(g)) + 1 + sum(len(_dump(d)) + 1 for _, d in pairs)
        if cost > room:
            break
        room -= cost
        kept.append(g)
        head["gpus_not_listed"] -= 1
        for c, d in pairs:
            c["gpus"].append(d)
            c["gpus_not_listed"] -= 1
        yield
    for c in clients:
        c["gpus"].sort(key=lambda d: d["device"])
    head["_gpus"] = kept


def run_to_end(gen: Steps) -> bytes:
    """All the steps at once, the frame joined (in-process callers with no loop to share)."""
    while True:
        try:
            next(gen)
        except StopIteration as done:
            return b"".join(done.value)
