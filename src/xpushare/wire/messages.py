"""The XPUShare message set, version 2 (docs/protocol.md is the definition): type numbers,
constants, the header and the fixed-size payloads as packed little-endian structs.

native/src/session/protocol.h mirrors this module and tests/test_protocol_agreement.py checks that they
agree, so it holds the definitions alone, to be read beside that header. How frames are encoded
and decoded is protocol.py's, which re-exports every name here: import from xpushare.wire.protocol.
(long: the whole message set is one definition, read beside protocol.h; split, its halves would
only point at each other.)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar

MAGIC = 0x4853564E  # the bytes "NVSH" read as a little-endian u32
VERSION = 2
MAX_PAYLOAD = 65536
# A CTL_REPLY alone may be larger: the scheduler's answer to nvsharectl (status with thousands of
# clients). Only a control client accepts one (FrameDecoder(replies=True)); whatever a peer sends
# the scheduler stays within MAX_PAYLOAD. Below limits.MAX_QUEUED, what one peer may have queued.
MAX_CTL_REPLY = 2 << 20
MAX_JSON_DEPTH = 32  # nesting of a CTL_* payload: requests are flat, replies a few levels deep

HEADER = struct.Struct("<IHHI")  # magic, version, type, length
HEADER_FIELDS = (("magic", "I"), ("version", "H"), ("type", "H"), ("length", "I"))


class MessageType(IntEnum):
    HELLO = 1
    WELCOME = 2
    ATTACH = 3
    ATTACHED = 4
    REQ_LOCK = 5
    LOCK_OK = 6
    DROP_LOCK = 7
    LOCK_RELEASED = 8
    MEM_UPDATE = 9
    CTL_REQUEST = 10
    CTL_REPLY = 11
    ERROR = 12
    BUSY_UPDATE = 13  # only to a scheduler whose WELCOME has FEATURE_BUSY
    SETTINGS = 14     # only to a scheduler whose WELCOME has FEATURE_QUOTAS
    LIMITS = 15       # only to a client that sent SETTINGS
    JOB = 16          # only to a scheduler whose WELCOME has FEATURE_JOBS
    EVICT = 17        # only to a client whose HELLO has HELLO_SWAP
    RESIDENCY = 18    # only to a scheduler whose WELCOME has FEATURE_SWAP
    BUSY_SPANS = 19   # only to a scheduler whose WELCOME has FEATURE_BUSY_SPANS
    SUSPEND = 20      # only to a client whose HELLO has HELLO_SUSPEND
    SUSPEND_READY = 21  # the answer to SUSPEND
    RESUMED = 22      # only to a client that answered SUSPEND
    RESUME_REQ = 23   # from a client that was suspended: its application wants to run
    QUEUE_BOUND = 24  # only to a client whose HELLO has HELLO_QUEUE_BOUND
    HOLD = 25         # only to a client whose HELLO has HELLO_HOLD
    BURSTS = 26       # only to a client whose HELLO has HELLO_HOLD
    BURST = 27        # only from a client that was sent BURSTS
    PREPARE_SWAP = 28  # only to a client whose HELLO has HELLO_PIN_AHEAD
    WAITERS = 29      # only to a client whose HELLO has HELLO_WAITERS


class DropReason(IntEnum):
    """`device.reason` of DROP_LOCK."""
    QUANTUM = 1
    PREEMPTED = 2
    ADMIN = 3
    MEMORY = 4  # running clients no longer fit in the GPU's memory together
    MOVE = 5    # the client is being moved to another GPU (nvsharectl move): it is suspended next


class ReleaseReason(IntEnum):
    """`device.reason` of LOCK_RELEASED."""
    DROPPED = 0
    IDLE = 1


PRIORITY_LIMIT = 1000        # priorities are clamped to -PRIORITY_LIMIT..PRIORITY_LIMIT
HELLO_REQUIRE_SCHEDULER = 1  # hello.flags bit 0
HELLO_SWAP = 2               # hello.flags bit 1: the client answers EVICT with RESIDENCY
HELLO_SUSPEND = 4            # hello.flags bit 2: the client answers SUSPEND (suspend.c)
HELLO_LATENCY_SENSITIVE = 8  # hello.flags bit 3: NVSHARE_LATENCY_SENSITIVE=1 (counts as the
                             # priority does: a raise only an admin's own process may declare)
HELLO_QUEUE_BOUND = 16       # hello.flags bit 4: the client applies QUEUE_BOUND
HELLO_HOLD = 32              # hello.flags bit 5: the client applies HOLD and reports BURST when asked
HELLO_PIN_AHEAD = 64         # hello.flags bit 6: the client pins host copies ahead on PREPARE_SWAP
HELLO_WAITERS = 128          # hello.flags bit 7: the client keeps an idle lock while WAITERS says 0
HELLO_MOVE = 256             # hello.flags bit 8: the client takes SUSPEND_MOVE and RESUMED_MOVED
SUSPEND_MOVE = 1             # suspend.flags bit 0: for a move to another GPU; a lock request of the
                             # client may be outstanding (the scheduler grants it only after the move)
RESUMED_MOVED = 1            # resumed.flags bit 0: restored onto another GPU under the same ordinal:
                             # re-read each device's identity and ATTACH it again before running
GRANT_PREFETCH = 1           # grant.flags bit 0: bring your allocations back to the GPU in bulk
DROP_EVICT = 1               # drop.flags bit 0: move your allocations to host memory in bulk
DROP_GANG = 2                # drop.flags bit 1: dropped with the rest of its job, so the drain
                             # may wait on a collective whose peer is dropped too: it is bounded
FEATURE_BUSY = 1             # welcome.features bit 0: the scheduler takes BUSY_UPDATE
FEATURE_QUOTAS = 2           # welcome.features bit 1: it takes SETTINGS and answers with LIMITS
FEATURE_JOBS = 4             # welcome.features bit 2: it takes JOB
FEATURE_SWAP = 8             # welcome.features bit 3: it takes RESIDENCY (and may send EVICT)
FEATURE_BUSY_SPANS = 16      # welcome.features bit 4: it takes BUSY_SPANS
FEATURE_SUSPEND = 32         # welcome.features bit 5: it may send SUSPEND and takes RESUME_REQ
BUSY_SPANS_MAX = 16          # busy_spans.count: spans in one BUSY_SPANS at most
EVICT_ROOM = 1               # evict.reason: another client needs the room on the GPU
RESIDENCY_ANSWER = 1         # residency.flags bit 0: the answer to an EVICT
RESIDENCY_REFUSED = 2        # residency.flags bit 1: host memory for swap ran out; what could not
                             # move stays on the GPU (resident_bytes says how much)
JOB_EXPLICIT = 1             # job.kind: NVSHARE_JOB names the job
JOB_TORCH = 2                # job.kind: a torch distributed run (WORLD_SIZE, MASTER_ADDR/PORT)
JOB_UNKNOWN = 0xFFFFFFFF     # job.rank, job.local_rank: not known
COMPUTE_LIMIT_SCALE = 1000   # settings/limits compute_limit: per mille of the GPU's time
COMPUTE_SHARE_SCALE = 1000   # settings compute_share: thousandths (1000 = a share of 1)


class SuspendStatus(IntEnum):
    """`status` of SUSPEND_READY: READY, or why the process cannot be suspended whole."""
    READY = 0              # its memory is out and its gates closed: it may be checkpointed now
    MANAGED = 1            # it holds managed memory (its own, or converted for oversubscription)
    SEVERAL_GPUS = 2       # it uses more than one GPU
    BUSY = 3               # it holds a GPU's lock, has work in flight, or is mid-capture
    NOT_MOVED = 4          # some of its memory could not leave the GPU (host memory bound, no swap)
    NO_SWAP = 5            # its memory cannot be moved here (NVSHARE_SWAP=off or the driver lacks calls)


class ProtocolError(Exception):
    """A malformed frame or payload."""


def field_layout(fields) -> dict[str, tuple[int, int]]:
    """{name: (offset, size)} for packed little-endian fields."""
    out, offset = {}, 0
    for name, fmt in fields:
        size = struct.calcsize("<" + fmt)
        out[name] = (offset, size)
        offset += size
    return out


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _fixed(text: str, size: int) -> bytes:
    """UTF-8, cut at a character boundary to fit `size` bytes (struct pads with NULs)."""
    data = text.encode("utf-8")
    if len(data) > size:
        data = data[:size].decode("utf-8", "ignore").encode("utf-8")
    return data


class _Payload:
    """Base of the fixed-size payload dataclasses: FIELDS drives packing, size and layout."""
    FIELDS: ClassVar[tuple[tuple[str, str], ...]]
    STRUCT: ClassVar[struct.Struct]
    SIZE: ClassVar[int]

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls.STRUCT = struct.Struct("<" + "".join(fmt for _, fmt in cls.FIELDS))
        cls.SIZE = cls.STRUCT.size
        # Read once here, not per message: pack and unpack are on the lock round trip.
        cls._NAMES = tuple(name for name, _ in cls.FIELDS)
        cls._TEXT = tuple(struct.calcsize(fmt) if fmt.endswith("s") else 0 for _, fmt in cls.FIELDS)
        cls._HAS_TEXT = any(cls._TEXT)

    @classmethod
    def layout(cls) -> dict[str, tuple[int, int]]:
        return field_layout(cls.FIELDS)

    def pack(self) -> bytes:
        values = [getattr(self, name) for name in self._NAMES]
        if self._HAS_TEXT:
            values = [_fixed(v, size) if size and isinstance(v, str) else v
                      for v, size in zip(values, self._TEXT)]
        return self.STRUCT.pack(*values)

    @classmethod
    def unpack(cls, data: bytes):
        if len(data) != cls.SIZE:
            raise ProtocolError(f"{cls.__name__} payload is {len(data)} bytes, expected {cls.SIZE}")
        values = cls.STRUCT.unpack(data)
        if cls._HAS_TEXT:
            values = [(_cstr(v) if isinstance(v, bytes) else v) for v in values]
        return cls(*values)


@dataclass
class Hello(_Payload):
    FIELDS = (("flags", "I"), ("priority", "i"), ("pod_name", "256s"), ("pod_namespace", "256s"))
    flags: int = 0
    priority: int = 0
    pod_name: str = ""
    pod_namespace: str = ""


@dataclass
class Welcome(_Payload):
    FIELDS = (("client_id", "Q"), ("protocol_version", "I"), ("features", "I"))
    client_id: int = 0
    protocol_version: int = VERSION
    features: int = 0  # FEATURE_* (0 from a scheduler that predates them: no BUSY_UPDATE)


@dataclass
class Attach(_Payload):
    FIELDS = (("device", "I"), ("flags", "I"), ("uuid", "48s"), ("name", "96s"),
              ("physical_memory", "Q"), ("capacity", "Q"))
    device: int = 0
    flags: int = 0
    uuid: str = ""
    name: str = ""
    physical_memory: int = 0
    capacity: int = 0


@dataclass
class Attached(_Payload):
    FIELDS = (("device", "I"), ("flags", "I"), ("capacity", "Q"))
    device: int = 0
    flags: int = 0
    capacity: int = 0


@dataclass
class LockRequest(_Payload):
    """REQ_LOCK."""
    FIELDS = (("device", "I"), ("reason", "I"))
    device: int = 0
    reason: int = 0


@dataclass
class Grant(_Payload):
    """LOCK_OK."""
    FIELDS = (("device", "I"), ("quantum_ms", "I"), ("flags", "I"), ("reserved", "I"))
    device: int = 0
    quantum_ms: int = 0
    flags: int = 0  # GRANT_PREFETCH
    reserved: int = 0


@dataclass
class DropLock(_Payload):
    """DROP_LOCK."""
    FIELDS = (("device", "I"), ("reason", "I"), ("flags", "I"), ("evict_mib", "I"))
    device: int = 0
    reason: int = 0     # DropReason
    flags: int = 0      # DROP_EVICT
    # With DROP_EVICT: the MiB the next holder needs moved (whole allocations, at least this
    # much); 0: all of them. Older libraries read it as reserved and move all.
    evict_mib: int = 0


@dataclass
class Released(_Payload):
    """LOCK_RELEASED, with what the client measured of its switch (microseconds)."""
    FIELDS = (("device", "I"), ("reason", "I"), ("drain_us", "I"), ("evict_us", "I"),
              ("prefetch_us", "I"), ("reserved", "I"))
    device: int = 0
    reason: int = 0       # ReleaseReason
    drain_us: int = 0     # DROP_LOCK/idle -> outstanding work finished
    evict_us: int = 0     # bulk move to host (DROP_EVICT), 0 if none
    prefetch_us: int = 0  # bulk move back at the grant being released, 0 if none
    reserved: int = 0


@dataclass
class MemUpdate(_Payload):
    FIELDS = (("device", "I"), ("reserved", "I"), ("managed_bytes", "Q"), ("other_bytes", "Q"))
    device: int = 0
    reserved: int = 0
    managed_bytes: int = 0
    other_bytes: int = 0


@dataclass
class BusyUpdate(_Payload):
    """BUSY_UPDATE: the GPU time the client's own work took on the device, ns, cumulative."""
    FIELDS = (("device", "I"), ("reserved", "I"), ("busy_ns", "Q"))
    device: int = 0
    reserved: int = 0
    busy_ns: int = 0


SPAN_FIELDS = (("start_ns", "Q"), ("end_ns", "Q"), ("busy_ns", "Q"))  # one span of BUSY_SPANS
SPAN = struct.Struct("<" + "".join(fmt for _, fmt in SPAN_FIELDS))


@dataclass
class BusySpans(_Payload):
    """BUSY_SPANS: when the GPU time of the next BUSY_UPDATE was taken. Each span is a stretch of
    host time (CLOCK_MONOTONIC, ns) in which the client's work kept the GPU busy, with the GPU time
    measured in it; the scheduler shares out the time of spans that overlap other clients' (docs/
    metrics.md). `spans` holds `count` of them (SPAN each), zeros after; `open_ns` is the start of
    a span still open at the report (0: none), whose GPU time a later report brings."""
    FIELDS = (("device", "I"), ("count", "I"), ("open_ns", "Q"),
              ("spans", f"{BUSY_SPANS_MAX * SPAN.size}s"))
    device: int = 0
    count: int = 0
    open_ns: int = 0
    spans: bytes = b""

    def pack(self) -> bytes:
        return self.STRUCT.pack(self.device, self.count, self.open_ns, self.spans)

    @classmethod
    def unpack(cls, data: bytes):
        if len(data) != cls.SIZE:
            raise ProtocolError(f"{cls.__name__} payload is {len(data)} bytes, expected {cls.SIZE}")
        device, count, open_ns, spans = cls.STRUCT.unpack(data)
        if count > BUSY_SPANS_MAX:
            raise ProtocolError(f"BusySpans count {count} is above {BUSY_SPANS_MAX}")
        return cls(device, count, open_ns, spans)

    @classmethod
    def of(cls, device: int, spans: list[tuple[int, int, int]], open_ns: int = 0) -> BusySpans:
        if len(spans) > BUSY_SPANS_MAX:
            raise ValueError(f"at most {BUSY_SPANS_MAX} spans")
        return cls(device, len(spans), open_ns, b"".join(SPAN.pack(*span) for span in spans))

    def intervals(self) -> list[tuple[int, int, int]]:
        """The spans: (start_ns, end_ns, busy_ns) each."""
        return [SPAN.unpack_from(self.spans, i * SPAN.size) for i in range(self.count)]


@dataclass
class Settings(_Payload):
    """SETTINGS: what the process's environment asks for (NVSHARE_COMPUTE_LIMIT,
    NVSHARE_COMPUTE_SHARE, NVSHARE_GPU_MEMORY_LIMIT); 0 = not set."""
    FIELDS = (("compute_limit", "I"), ("compute_share", "I"), ("memory_limit", "Q"))
    compute_limit: int = 0   # per mille of the GPU's time, 1..COMPUTE_LIMIT_SCALE
    compute_share: int = 0   # thousandths of a share, >= 1
    memory_limit: int = 0    # bytes per GPU


@dataclass
class Limits(_Payload):
    """LIMITS: the limits the client applies from now on (what the scheduler settled on from the
    environment, the pod's annotations and nvsharectl); 0 = none."""
    FIELDS = (("compute_limit", "I"), ("reserved", "I"), ("memory_limit", "Q"))
    compute_limit: int = 0   # per mille of the GPU's time
    reserved: int = 0
    memory_limit: int = 0    # bytes per GPU


@dataclass
class Job(_Payload):
    """JOB: which multi-process job the client belongs to, for scheduling its GPUs together. Sizes
    0 and ranks JOB_UNKNOWN are not known; name and rendezvous may be empty."""
    FIELDS = (("kind", "B"), ("reserved", "3s"), ("world_size", "I"), ("local_world_size", "I"),
              ("rank", "I"), ("local_rank", "I"), ("name", "128s"), ("rendezvous", "128s"))
    kind: int = 0              # JOB_EXPLICIT or JOB_TORCH
    reserved: str = ""         # 3 bytes of padding, zero
    world_size: int = 0        # processes in the job (0 = unknown)
    local_world_size: int = 0  # of them on this node (0 = unknown)
    rank: int = JOB_UNKNOWN
    local_rank: int = JOB_UNKNOWN
    name: str = ""             # NVSHARE_JOB, or TORCHELASTIC_RUN_ID
    rendezvous: str = ""       # "MASTER_ADDR:MASTER_PORT" (JOB_TORCH)


@dataclass
class Evict(_Payload):
    """EVICT: move this device's memory to host now (the client does not hold its lock); the
    client answers with RESIDENCY (flags RESIDENCY_ANSWER)."""
    FIELDS = (("device", "I"), ("reason", "I"), ("reserved", "Q"))
    device: int = 0
    reason: int = 0    # EVICT_ROOM
    reserved: int = 0


@dataclass
class Residency(_Payload):
    """RESIDENCY: where the client's memory on a device is now, and how long the move took."""
    FIELDS = (("device", "I"), ("flags", "I"), ("resident_bytes", "Q"), ("host_bytes", "Q"),
              ("move_us", "I"), ("reserved", "I"))
    device: int = 0
    flags: int = 0           # RESIDENCY_ANSWER, RESIDENCY_REFUSED
    resident_bytes: int = 0  # of its memory on the device, on the GPU now
    host_bytes: int = 0      # of it, swapped out to host memory now
    move_us: int = 0         # the move this report ends (an eviction or a swap-in), 0 if none
    reserved: int = 0


@dataclass
class Suspend(_Payload):
    """SUSPEND: move all your memory out and close your gates: the scheduler checkpoints the process
    next; the client answers with SUSPEND_READY."""
    FIELDS = (("flags", "I"), ("reserved", "I"))
    flags: int = 0  # SUSPEND_MOVE (only to a client whose HELLO has HELLO_MOVE)
    reserved: int = 0


@dataclass
class SuspendReady(_Payload):
    """SUSPEND_READY: READY (nothing of the process is on a GPU but its context, nothing of it runs
    there), or why it cannot be suspended."""
    FIELDS = (("status", "I"), ("reserved", "I"))
    status: int = 0  # SuspendStatus
    reserved: int = 0


@dataclass
class Resumed(_Payload):
    """RESUMED: the process runs again (restored, or never checkpointed)."""
    FIELDS = (("flags", "I"), ("reserved", "I"))
    flags: int = 0  # RESUMED_MOVED: restored onto another GPU
    reserved: int = 0


@dataclass
class ResumeRequest(_Payload):
    """RESUME_REQ: the application of a suspended process wants to run."""
    FIELDS = (("reason", "I"), ("reserved", "I"))
    reason: int = 0
    reserved: int = 0


@dataclass
class QueueBound(_Payload):
    """QUEUE_BOUND: keep the GPU time of the work queued past the gate on this device within
    queue_us (a latency-sensitive client shares the GPU); 0 lifts the bound."""
    FIELDS = (("device", "I"), ("queue_us", "I"))
    device: int = 0
    queue_us: int = 0


@dataclass
class Hold(_Payload):
    """HOLD: a latency-sensitive client of this device is in a burst: submit no new work for at
    most hold_us (the client reopens by itself after that); 0 reopens the gate now."""
    FIELDS = (("device", "I"), ("hold_us", "I"))
    device: int = 0
    hold_us: int = 0


@dataclass
class Bursts(_Payload):
    """BURSTS: report (on = 1) or stop reporting (0) when your work on this device begins and
    ends (BURST): you are latency-sensitive and others share the device."""
    FIELDS = (("device", "I"), ("on", "I"))
    device: int = 0
    on: int = 0


@dataclass
class Burst(_Payload):
    """BURST: this client's work on the device began (active = 1: the first kernel launch after
    an idle point) or ended (0: an idle point, its work done)."""
    FIELDS = (("device", "I"), ("active", "I"))
    device: int = 0
    active: int = 0


@dataclass
class PrepareSwap(_Payload):
    """PREPARE_SWAP: a swap-out of your memory on this device is likely soon (on = 1): make its
    host copies now, in the background, so that the swap-out copies at the speed of the bus; 0:
    no longer likely (what was made may be kept)."""
    FIELDS = (("device", "I"), ("on", "I"))
    device: int = 0
    on: int = 0


@dataclass
class Waiters(_Payload):
    """WAITERS: whether any other client waits for this device (waiting = 1) or none does (0).
    A holder told 0 keeps its lock while idle (giving it up would only cost its next request a
    round trip); told 1, or never told, it gives an idle lock up as NVSHARE_IDLE_RELEASE_MS says."""
    FIELDS = (("device", "I"), ("waiting", "I"))
    device: int = 0
    waiting: int = 0


# The payload class of every fixed-size type; the others are variable (JSON or text).
PAYLOADS: dict[MessageType, type[_Payload]] = {
    MessageType.HELLO: Hello,
    MessageType.WELCOME: Welcome,
    MessageType.ATTACH: Attach,
    MessageType.ATTACHED: Attached,
    MessageType.REQ_LOCK: LockRequest,
    MessageType.LOCK_OK: Grant,
    MessageType.DROP_LOCK: DropLock,
    MessageType.LOCK_RELEASED: Released,
    MessageType.MEM_UPDATE: MemUpdate,
    MessageType.BUSY_UPDATE: BusyUpdate,
    MessageType.BUSY_SPANS: BusySpans,
    MessageType.SETTINGS: Settings,
    MessageType.LIMITS: Limits,
    MessageType.JOB: Job,
    MessageType.EVICT: Evict,
    MessageType.RESIDENCY: Residency,
    MessageType.SUSPEND: Suspend,
    MessageType.SUSPEND_READY: SuspendReady,
    MessageType.RESUMED: Resumed,
    MessageType.RESUME_REQ: ResumeRequest,
    MessageType.QUEUE_BOUND: QueueBound,
    MessageType.HOLD: Hold,
    MessageType.WAITERS: Waiters,
    MessageType.BURSTS: Bursts,
    MessageType.BURST: Burst,
    MessageType.PREPARE_SWAP: PrepareSwap,
}
