"""Who may do and see what over the scheduler's socket: the one place that decides it.

An admin is root, the scheduler's own uid, or a process in the --admin-group group, all by the
peer's kernel credentials (SO_PEERCRED, /proc/PID/status), never by what a client says, and never
a process in a pod other than the scheduler's own: root in a container is not the node's admin (the
device plugin mounts the socket into every GPU pod, and pods run as root unless told otherwise).
An admin may change settings (control/ops.py), sees every client in full, and its own processes may
raise themselves above the default priority and share (may_raise_itself).
The one exception is nvshare-dra-plugin, which runs in a pod of its own: it may set and clear DRA
claims' limits (set_claim, clear_claim) when it connects through --claims-socket, a second socket
in a directory that only its pod mounts (the chart's layout; GPU pods get the scheduler's socket
directory, never that one). The socket it came through is the kernel's fact, not the client's word.
The same pod rule decides who is exempt from the per-uid caps and the log-line budget
(node_privileged): root or the scheduler's uid, on the node.

Everyone may read status and top, but a non-admin sees only its own processes in full: those of
its uid in its own pod (or, outside any pod, those of its uid outside any pod). Every other client
is counted, not listed (control/statusreply.py): their command lines (an argument may be a
password) and pods are not its business, and listing every client of the node to every user who
asks made each reply cost the node's size. The pod counts as much as the uid: pods run as root
unless told otherwise, so uid 0 in one GPU pod is not the same tenant as uid 0 in another. Nor does
a non-admin see another tenant's pod's name where that is the label of a job.

Control requests of a non-admin uid (status builds cost the loop time) are taken from a token
bucket per uid: REQUESTS_PER_S on average, REQUESTS_BURST at once. An admin is not limited: the
chart's health probe and an operator must get through.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from . import limits, peer

if TYPE_CHECKING:
    from ..shell.connection import Conn
    from .state import SchedulerState

REQUESTS_PER_S = 10.0  # control requests a non-admin uid may make, on average
REQUESTS_BURST = 20    # ... and at once


def is_admin(state: SchedulerState, conn: Conn) -> bool:
    """Root, the scheduler's own uid, or a member of --admin-group. Decided once per connection:
    the groups are read from /proc, and the process that connected does not change."""
    if conn.admin is None:
        gid = state.config.admin_gid
        conn.admin = (conn.uid in (0, os.geteuid()) or (
            gid is not None and gid in peer.groups(conn.pid, conn.gid))) and on_the_node(state, conn.pod)
    return conn.admin


def pod_key(pod) -> str | None:
    """What tells one pod from another: its UID from the kernel's cgroup (None: in no pod)."""
    return getattr(pod, "uid", None) if pod is not None else None


class Viewer:
    """What one requester may see of the clients (status, top): an admin all; anyone else its own
    tenant's, same uid and same pod (pod: the requester's, None when in no pod)."""

    def __init__(self, uid: int, admin: bool, pod=None):
        self.uid, self.admin, self.pod = uid, admin, pod_key(pod)

    def sees(self, client: Conn) -> bool:
        """Whether the client is listed (in full): its own tenant's, or any to an admin."""
        return self.admin or (client.uid == self.uid and pod_key(client.pod) == self.pod)

    def job_label(self, job) -> str | None:
        """The job's label, unless it is another tenant's pod's name."""
        if job.key[0] != "pod" or self.admin or any(map(self.sees, job.members)):
            return job.label
        return None


def on_the_node(state: SchedulerState, pod) -> bool:
    """A process in `pod` (None: in none) is the node's: outside any pod, or in the scheduler's
    own (an operator's `kubectl exec` into it)."""
    if pod is None:
        return True
    own = state.pods.own()
    return own is not None and getattr(own, "uid", None) == getattr(pod, "uid", None)


def node_privileged(state: SchedulerState, uid: int, pod) -> bool:
    """Exempt from the per-uid caps and admitted into the connection reserve (limits.privileged:
    root, the scheduler's uid), and on the node: root in a GPU pod is a tenant like any other."""
    return limits.privileged(uid) and on_the_node(state, pod)


def may_raise_itself(state: SchedulerState, conn: Conn) -> bool:
    """Whether what the client declares of itself (priority, share) may raise it above the
    default (policy/declared.py): an admin's own process (the cluster raises a pod by its
    annotations or its DRA claim)."""
    return is_admin(state, conn)


def may_run(state: SchedulerState, conn: Conn, claims_op: bool) -> bool:
    """Whether `conn` may run an op that changes settings; claims_op: set_claim or clear_claim,
    which a connection through --claims-socket may run too."""
    return (claims_op and conn.claims_socket) or is_admin(state, conn)


def viewer(state: SchedulerState, conn: Conn) -> Viewer:
    return Viewer(conn.uid, is_admin(state, conn), conn.pod)


class RequestBudget:
    """A token bucket per uid. Buckets that have filled up again are forgotten (so one per uid
    that asked recently: bounded by the uids that have connections, each capped)."""

    _PRUNE_AT = 1024

    def __init__(self, rate: float = REQUESTS_PER_S, burst: int = REQUESTS_BURST,
                 clock=time.monotonic):
        self.rate, self.burst, self._clock = rate, burst, clock
        self._buckets: dict[int, tuple[float, float]] = {}  # uid -> (tokens, when counted)

    def take(self, uid: int) -> float:
        """Take one request of `uid`: 0.0 when it may go on, else the seconds until it may."""
        now = self._clock()
        tokens, then = self._buckets.get(uid, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        if tokens < 1.0:
            self._buckets[uid] = (tokens, now)
            return (1.0 - tokens) / self.rate
        if len(self._buckets) >= self._PRUNE_AT:
            self._prune(now)
        self._buckets[uid] = (tokens - 1.0, now)
        return 0.0

    def _prune(self, now: float) -> None:
        full = [u for u, (t, then) in self._buckets.items()
                if t + (now - then) * self.rate >= self.burst]
        for uid in full:
            del self._buckets[uid]
