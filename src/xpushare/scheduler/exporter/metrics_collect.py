"""The exporter's view of the scheduler in the Prometheus formats (docs/metrics.md lists the series).

A scrape happens in two steps, both on the scheduler's loop (nothing else may read its state):
take() copies what the series show out of live state into plain tuples (Scrape): the GPUs from
their arbiters' settings and public holders and waiting maps, the clients from their connections,
the counts of metrics.py; then render() turns a Scrape into text a piece at a time, so that the caller can let
the loop serve lock requests between pieces: formatting a thousand clients' series takes tens of
milliseconds in prometheus_client, which no lock round trip should wait for. Client series come
from the clients connected at the scrape, so a client's series go when it leaves.

Needs prometheus_client (pip install 'xpushare[kubernetes]'); the daemon imports this module only
when --metrics-port is given. A row's fields and the families that read them stay in one file, so
that a new series is written in one place; NVML's readings are nvml_reader.py's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from prometheus_client.core import (
    CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily,
)
from prometheus_client.utils import floatToGoString

from ... import __version__
from ...wire.protocol import DropReason, MessageType
from ..node import metrics, swap
from ..node.metrics import PHASES
from .metrics_jobs import JOB_FAMILIES, JobRow, take_jobs
from ..policy import DEFAULT_SHARE


# Samples formatted in one step of the slicer (exposition.py): prometheus_client takes some 5-10 us
# a sample of a client family (seven labels), so that a step stays within the slicer's 0.5 ms.
PIECE_SAMPLES = 30
TAKE_CLIENTS = 150  # clients copied between two returns to the loop (about 0.3 ms)
GPU = ("gpu", "uuid")
# `client` (the scheduler's client id, as nvsharectl status shows it) keeps two connections of one
# process (or of one pid reused) apart, which the pid alone does not.
CLIENT = ("gpu", "uuid", "client", "pid", "namespace", "pod", "container")
DROP_REASONS = tuple((int(r), r.name.lower()) for r in DropReason)
_NO_DROPS = (0,) * len(DROP_REASONS)


@dataclass
class GpuRow:
    labels: tuple[str, str]
    name: str
    capacity: int
    mode: str
    tq: float
    holders: int
    waiters: int
    switches: int
    wait: tuple                   # Histogram.copy()
    phases: dict[str, tuple]      # phase -> Histogram.copy()
    clients: int = 0
    nvml: tuple | None = None     # (memory used, utilization ratio or None)
    resident: int = 0             # the policy's count of its clients' bytes on the GPU
    swapped: int = 0              # its clients' bytes swapped out to host, as they reported
    reclaims: int = 0             # EVICTs sent


class ClientRow(NamedTuple):  # a tuple: a thousand are made on the loop at each scrape
    labels: tuple[str, ...]       # CLIENT
    managed: int
    device: int
    priority: int
    grants: int
    drops: tuple[int, ...]        # per DROP_REASONS, in its order
    held: float
    waited: float
    busy: float = 0.0
    busy_ratio: float | None = None     # over metrics.BUSY_WINDOW; None: not known yet
    compute_limit: float | None = None  # its quota (quotas.py): fraction, None: none
    compute_share: float = 1.0
    memory_limit: int | None = None
    resident: int = 0                   # its bytes on the GPU as the scheduler counts them
    swapped: int = 0                    # its bytes swapped out to host (RESIDENCY)
    suspended: int = 0                  # 1 while it is suspended whole (node/suspend.py)
    suspends: int = 0                   # times it was suspended
    moves: int = 0                      # times it was moved to another GPU (node/move.py)
    queueing: tuple | None = None       # its request -> grant waits: the counts per bucket of
                                        # metrics.QUEUE_BUCKETS, then their sum (flat: see Scrape)


@dataclass
class Scrape:
    gpus: list[GpuRow] = field(default_factory=list)
    # Each a plain tuple of ClientRow's fields: the copy lives for the whole answer, over many
    # slices, and ClientRows (a tuple subclass) stay tracked by the collector, so that thousands
    # of them promoted at each scrape set off full collections of the daemon's heap (60-160 ms at
    # 5000 clients). Plain tuples of numbers and strings the collector stops tracking.
    clients: list[tuple] = field(default_factory=list)
    jobs: list[JobRow] = field(default_factory=list)
    connections: int = 0
    accepted: int = 0
    messages: dict[int, int] = field(default_factory=dict)
    malformed: int = 0


def take(state, now: float, nvml=None) -> Scrape:
    """Copy what the series show out of `state` at `now`, all at once (take_pieces)."""
    for scrape in take_pieces(state, now, nvml):
        pass
    return scrape


def take_pieces(state, now: float, nvml=None) -> Iterator[Scrape]:
    """Copy what the series show out of `state` at `now`, no formatting: the scheduler's counts
    and the GPUs, then the clients TAKE_CLIENTS at a time, yielding the Scrape after each piece so
    that the caller may return to the loop (some 1.5 us a client); complete at the last. The
    clients are those connected at the start; one that leaves meanwhile shows once more. Then the
    jobs (metrics_jobs.take_jobs), as they are when their piece is taken.
    nvml: an NvmlReader, or None for no NVML series."""
    stats = state.stats
    scrape = Scrape(connections=len(state.conns), accepted=stats.connections,
                    messages=dict(stats.messages), malformed=stats.malformed)
    rows = {g: _gpu_row(g, nvml) for g in state.registry.in_order()}
    scrape.gpus = list(rows.values())
    clients = state.clients()
    gangs = state.registry.gangs
    per_gpu: Counter = Counter()
    swapped: Counter = Counter()
    for start in range(0, len(clients), TAKE_CLIENTS):
        for c in clients[start:start + TAKE_CLIENTS]:
            pod = c.pod
            ident = (str(c.id), str(c.pid), getattr(pod, "namespace", None) or "",
                     getattr(pod, "name", None) or "", getattr(pod, "container_id", None) or "")
            for g in c.devices.values():
                per_gpu[g] += 1
                row = _client_row(c, g, ident, now, gangs)
                swapped[g] += row.swapped
                scrape.clients.append(tuple(row))
        yield scrape
    for _ in take_jobs(state.registry, scrape.jobs):
        yield scrape
    for g, n in per_gpu.items():
        if g in rows:
            rows[g].clients, rows[g].swapped = n, min(swapped[g], swap.HOST_MEMORY)
    yield scrape


def _gpu_row(g, nvml) -> GpuRow:
    # The arbiter's settings and public holders and waiting maps, not snapshot(): that one also
    # puts the waiters in serving order, some 2 ms at a thousand waiters, for two counts.
    arb = g.arbiter
    return GpuRow((_index(g), g.uuid), g.name or "", g.capacity, arb.mode.value, arb.tq,
                  len(arb.holders), len(arb.waiting), g.stats.switches, g.stats.wait.copy(),
                  {p: h.copy() for p, h in g.stats.phases.items()},
                  nvml=nvml.read(g.index) if nvml is not None and g.index is not None else None,
                  resident=arb.resident_total(), reclaims=g.stats.reclaims)


def _index(gpu) -> str:
    return "" if gpu.index is None else str(gpu.index)


def _client_row(c, g, ident: tuple, now: float, gangs) -> ClientRow:
    managed, other = c.memory.get(g.uuid, (0, 0))
    q = c.quota
    share = DEFAULT_SHARE if q.compute_share is None else q.compute_share
    resident, swapped = swap.client_resident(gangs, c, g), swap.client_swapped(c, g)
    asleep = (int(c.suspend.phase == "suspended"), c.suspend.suspends, c.suspend.moves)
    st = c.locks.get(g)
    if st is None:
        return ClientRow((_index(g), g.uuid) + ident, managed, other, c.priority, 0, _NO_DROPS,
                         0.0, 0.0, 0.0, None, q.compute_limit, share, q.memory_limit, resident,
                         swapped, *asleep, None)
    held = st.held + (max(0.0, now - st.granted) if st.granted is not None else 0.0)
    waited = st.waited + (max(0.0, now - st.requested) if st.requested is not None else 0.0)
    return ClientRow((_index(g), g.uuid) + ident, managed, other, c.priority, st.grants,
                     tuple(st.drops.get(r, 0) for r, _ in DROP_REASONS), held, waited,
                     metrics.busy_seconds(st, now),
                     metrics.busy_ratio(st, now), q.compute_limit, share, q.memory_limit, resident,
                     swapped, *asleep, (*st.queueing.counts, st.queueing.total))


def render(scrape: Scrape, encoder, openmetrics: bool) -> Iterator[bytes]:
    """The exposition of `scrape` in pieces (encoder: prometheus_client's generate_latest of the
    format asked for). Each piece is one or more whole metric families, or the next clients' (or
    jobs') samples of a client (job) family (about PIECE_SAMPLES), whose HELP and TYPE lines only
    its first piece carries."""
    yield _encode(encoder, list(_scheduler_families(scrape)))
    yield _encode(encoder, list(_gpu_families(scrape)))
    for families, rows, row in ((_CLIENT_FAMILIES, scrape.clients, ClientRow._make),
                                (JOB_FAMILIES, scrape.jobs, None)):
        for make, per_row in families:
            step = max(1, PIECE_SAMPLES // per_row)
            for start in range(0, max(1, len(rows)), step):
                piece = rows[start:start + step]
                text = _encode(encoder, [make(piece if row is None else [row(t) for t in piece])])
                yield _strip_header(text) if start else text
    if openmetrics:
        yield b"# EOF\n"


class _Families:
    """What prometheus_client's encoders take for a registry: something with collect()."""

    def __init__(self, families):
        self.families = families

    def collect(self):
        return self.families


def _encode(encoder, families) -> bytes:
    text = encoder(_Families(families))
    return text[:-6] if text.endswith(b"# EOF\n") else text  # one EOF, at the end (render)


def _strip_header(text: bytes) -> bytes:
    lines = text.split(b"\n")
    start = next((i for i, line in enumerate(lines) if not line.startswith(b"# ")), len(lines))
    return b"\n".join(lines[start:])


def _scheduler_families(s: Scrape):
    yield InfoMetricFamily("xpushare_build", "The scheduler's version.", {"version": __version__})
    yield GaugeMetricFamily("xpushare_scheduler_connections",
                            "Open connections: clients and nvsharectl sessions.", s.connections)
    yield CounterMetricFamily("xpushare_scheduler_connections_accepted",
                              "Connections admitted since the scheduler started.", s.accepted)
    messages = CounterMetricFamily("xpushare_scheduler_messages",
                                   "Messages handled, by type.", labels=["type"])
    for t in MessageType:
        if t in s.messages or t in _INBOUND:
            messages.add_metric([t.name.lower()], s.messages.get(t, 0))
    yield messages
    yield CounterMetricFamily("xpushare_scheduler_malformed_frames",
                              "Frames that were not a valid message, or broke the protocol's "
                              "order; each closed its connection.", s.malformed)


# Every type a peer may send: each has a series from the start (0 until one arrives).
_INBOUND = tuple(MessageType[t] for t in (
    "HELLO", "ATTACH", "REQ_LOCK", "LOCK_RELEASED", "MEM_UPDATE", "BUSY_UPDATE", "SETTINGS", "JOB",
    "RESIDENCY", "BUSY_SPANS", "CTL_REQUEST"))


def _gpu_families(s: Scrape):
    info = InfoMetricFamily("xpushare_gpu", "A GPU the scheduler knows.", labels=GPU)
    mode = InfoMetricFamily("xpushare_gpu_mode", "The GPU's scheduling mode.", labels=GPU)
    gauges = {name: GaugeMetricFamily(f"xpushare_gpu_{name}", doc, labels=GPU)
              for name, doc in _GPU_GAUGES}
    switches = CounterMetricFamily("xpushare_gpu_switches", "Drops that handed the GPU to another "
                                   "client (quantum, preempted, memory).", labels=GPU)
    reclaims = CounterMetricFamily("xpushare_gpu_reclaims", "EVICTs sent to idle clients to move "
                                   "their memory on the GPU to host, for room.", labels=GPU)
    wait = HistogramMetricFamily("xpushare_lock_wait_seconds",
                                 "Lock waits, from REQ_LOCK to the grant.", labels=GPU)
    phase = HistogramMetricFamily("xpushare_gpu_switch_seconds", "Phases of switches as clients "
                                  "report them in LOCK_RELEASED (drain, evict, prefetch) and "
                                  "RESIDENCY (swap_out, swap_in), each at most 60 s.",
                                  labels=GPU + ("phase",))
    for g in s.gpus:
        info.add_metric(g.labels, {"name": g.name})
        mode.add_metric(g.labels, {"mode": g.mode})
        values = {"capacity_bytes": g.capacity, "time_quantum_seconds": g.tq,
                  "clients": g.clients, "lock_holders": g.holders, "lock_waiters": g.waiters,
                  "resident_bytes": g.resident, "swapped_bytes": g.swapped}
        if g.nvml is not None:
            values["memory_used_bytes"], values["utilization_ratio"] = g.nvml
        for name, value in values.items():
            if value is not None:
                gauges[name].add_metric(g.labels, value)
        switches.add_metric(g.labels, g.switches)
        reclaims.add_metric(g.labels, g.reclaims)
        wait.add_metric(g.labels, *_buckets(g.wait))
        for p in PHASES:
            phase.add_metric(g.labels + (p,), *_buckets(g.phases[p]))
    yield from (info, mode, *gauges.values(), switches, reclaims, wait, phase)


_GPU_GAUGES = (
    ("capacity_bytes", "The memory the scheduler counts the GPU as (--gpu-memory, else NVML's "
                       "total); 0 when unknown."),
    ("memory_used_bytes", "Memory in use on the GPU, as NVML reports it."),
    ("utilization_ratio", "Share of the last sample period in which a kernel ran, from NVML."),
    ("time_quantum_seconds", "The quantum a holder gets when clients take turns."),
    ("clients", "Client processes attached to the GPU."),
    ("lock_holders", "Clients holding the GPU's lock, draining ones included."),
    ("lock_waiters", "Clients waiting for the GPU's lock."),
    ("resident_bytes", "Its clients' memory on the GPU as the scheduler counts it against the "
                       "capacity: holders' footprints, and idle clients' until they swap out."),
    ("swapped_bytes", "Its clients' memory swapped out to host memory, as they last reported it "
                      "(RESIDENCY)."),
)


def _buckets(hist) -> tuple[list, float]:
    bounds, counts, total = hist
    cumulative, out = 0, []
    for bound, n in zip((*bounds, float("inf")), counts):
        cumulative += n
        out.append((floatToGoString(bound), cumulative))
    return out, total


def _gauge(name: str, doc: str, value):
    """A gauge of the clients whose `value` is not None (a limit not set is no sample: 0 would
    read as a limit of nothing)."""
    def make(rows):
        family = GaugeMetricFamily(name, doc, labels=CLIENT)
        for r in rows:
            v = value(r)
            if v is not None:
                family.add_metric(r.labels, v)
        return family
    return make


def _counter(name: str, doc: str, value):
    def make(rows):
        family = CounterMetricFamily(name, doc, labels=CLIENT)
        for r in rows:
            family.add_metric(r.labels, value(r))
        return family
    return make


def _memory(rows):
    family = GaugeMetricFamily("xpushare_client_memory_bytes", "The client's memory on the GPU as "
                               "it reports it (MEM_UPDATE): managed allocations, and other device "
                               "memory.", labels=CLIENT + ("kind",))
    for r in rows:
        family.add_metric(r.labels + ("managed",), r.managed)
        family.add_metric(r.labels + ("device",), r.device)
    return family


def _queueing(rows):
    family = HistogramMetricFamily("xpushare_client_queueing_delay_seconds", "The client's waits "
                                   "for the lock, from REQ_LOCK to the grant (its queueing delay).",
                                   labels=CLIENT)
    for r in rows:
        if r.queueing is not None:
            family.add_metric(r.labels, *_buckets((metrics.QUEUE_BUCKETS, r.queueing[:-1],
                                                   r.queueing[-1])))
    return family


def _drops(rows):
    family = CounterMetricFamily("xpushare_client_lock_drops", "DROP_LOCKs the client was sent, "
                                 "by reason.", labels=CLIENT + ("reason",))
    for r in rows:
        for (_, name), count in zip(DROP_REASONS, r.drops):
            family.add_metric(r.labels + (name,), count)
    return family


_CLIENT_FAMILIES = (  # (make a family of some clients' samples, samples per client)
    (_memory, 2),
    (_gauge("xpushare_client_priority", "The client's scheduling priority.",
            lambda r: r.priority), 1),
    (_gauge("xpushare_client_gpu_resident_bytes", "The client's memory on the GPU as the "
            "scheduler counts it: its footprint, or after a swap-out what it reported left on the "
            "GPU.", lambda r: r.resident), 1),
    (_gauge("xpushare_client_gpu_swapped_bytes", "The client's memory on the GPU swapped out to "
            "host memory, as it last reported it (RESIDENCY).", lambda r: r.swapped), 1),
    (_counter("xpushare_client_lock_grants", "Locks granted to the client.",
              lambda r: r.grants), 1),
    (_drops, len(DROP_REASONS)),
    (_counter("xpushare_client_lock_held_seconds", "Time the client held the lock, the current "
              "hold included.", lambda r: r.held), 1),
    (_counter("xpushare_client_lock_wait_seconds", "Time the client waited for the lock, the "
              "current wait included.", lambda r: r.waited), 1),
    (_queueing, len(metrics.QUEUE_BUCKETS) + 3),  # the buckets, +Inf, _count and _sum
    (_counter("xpushare_client_gpu_busy_seconds", "GPU time the client's own work took, by its "
              "library's timing events; what a GPU's clients claim at once is shared out.",
              lambda r: r.busy), 1),
    (_gauge("xpushare_client_gpu_busy_ratio", "GPU time the client's own work took over "
                      "the wall time of the last 10 s: the share of the GPU it achieved.",
                      lambda r: r.busy_ratio), 1),
    (_gauge("xpushare_client_compute_limit_ratio", "The client's compute limit, a "
                      "fraction of the GPU's time (clients with a limit only).",
                      lambda r: r.compute_limit), 1),
    (_gauge("xpushare_client_compute_share", "The client's compute share (1 unless set).",
            lambda r: r.compute_share), 1),
    (_gauge("xpushare_client_memory_limit_bytes", "The client's memory limit per GPU "
                      "(clients with a limit only).", lambda r: r.memory_limit), 1),
    (_gauge("xpushare_client_suspended", "1 while the client is suspended whole (the driver's "
            "checkpoint: nothing of it on the GPU), else 0.", lambda r: r.suspended), 1),
    (_counter("xpushare_client_suspends", "Times the client was suspended whole.",
              lambda r: r.suspends), 1),
    (_counter("xpushare_client_moves", "Times the client was moved to another GPU of the node.",
              lambda r: r.moves), 1),
)
