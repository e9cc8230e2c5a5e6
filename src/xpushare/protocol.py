"""The XPUShare wire protocol, version 2 (docs/protocol.md is the definition).

Frames are a 12-byte little-endian header (magic, version, type, length) and `length` payload bytes.
Fixed payloads are packed structs; CTL_REQUEST/CTL_REPLY carry a JSON object, ERROR UTF-8 text.
native/src/protocol.h mirrors this module; tests/test_protocol_agreement.py checks they agree.
One file, a little over 400 lines, on purpose: it is the Python half of that pair, read beside it.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, NamedTuple

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


class DropReason(IntEnum):
    """`device.reason` of DROP_LOCK."""
    QUANTUM = 1
    PREEMPTED = 2
    ADMIN = 3
    MEMORY = 4  # running clients no longer fit in the GPU's memory together


class ReleaseReason(IntEnum):
    """`device.reason` of LOCK_RELEASED."""
    DROPPED = 0
    IDLE = 1


PRIORITY_LIMIT = 1000        # priorities are clamped to -PRIORITY_LIMIT..PRIORITY_LIMIT
HELLO_REQUIRE_SCHEDULER = 1  # hello.flags bit 0
GRANT_PREFETCH = 1           # grant.flags bit 0: bring your allocations back to the GPU in bulk
DROP_EVICT = 1               # drop.flags bit 0: move your allocations to host memory in bulk
DROP_GANG = 2                # drop.flags bit 1: dropped with the rest of its job (bounded drain)
FEATURE_BUSY = 1             # welcome.features bit 0: the scheduler takes BUSY_UPDATE
FEATURE_QUOTAS = 2           # welcome.features bit 1: it takes SETTINGS and answers with LIMITS
COMPUTE_LIMIT_SCALE = 1000   # settings/limits compute_limit: per mille of the GPU's time
COMPUTE_SHARE_SCALE = 1000   # settings compute_share: thousandths (1000 = a share of 1)


class ProtocolError(Exception):
    """A malformed frame or payload."""


def _layout(fields):
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
        return _layout(cls.FIELDS)

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
    FIELDS = (("device", "I"), ("reason", "I"), ("flags", "I"), ("reserved", "I"))
    device: int = 0
    reason: int = 0  # DropReason
    flags: int = 0   # DROP_EVICT
    reserved: int = 0


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
    MessageType.SETTINGS: Settings,
    MessageType.LIMITS: Limits,
}
_TYPE_OF = {cls: t for t, cls in PAYLOADS.items()}
# The decoder's tables, by the header's integer type: read once per frame on the lock round trip.
_TYPES = {int(t): t for t in MessageType}
_FIXED_SIZES = {int(t): cls.SIZE for t, cls in PAYLOADS.items()}
_HEADER_SIZE = HEADER.size


class Frame(NamedTuple):
    type: MessageType
    payload: bytes

    def decode(self):
        """The payload as its dataclass, a dict (CTL_*) or a str (ERROR)."""
        cls = PAYLOADS.get(self.type)
        if cls is not None:
            return cls.unpack(self.payload)
        if self.type == MessageType.ERROR:
            return self.payload.decode("utf-8", "replace")
        return decode_json(self.payload)


def encode_frame(msg_type: MessageType | int, payload: bytes | _Payload = b"") -> bytes:
    if isinstance(payload, _Payload):
        payload = payload.pack()
    limit = MAX_CTL_REPLY if msg_type == MessageType.CTL_REPLY else MAX_PAYLOAD
    if len(payload) > limit:
        raise ProtocolError(f"payload of {len(payload)} bytes exceeds {limit}")
    return HEADER.pack(MAGIC, VERSION, int(msg_type), len(payload)) + payload


def encode(msg: _Payload, msg_type: MessageType | None = None) -> bytes:
    """A frame for a payload dataclass (each fixed payload belongs to one message type)."""
    if msg_type is None:
        msg_type = _TYPE_OF.get(type(msg))
        if msg_type is None:
            raise ValueError(f"{type(msg).__name__} needs an explicit message type")
    return encode_frame(msg_type, msg.pack())


def encode_json(msg_type: MessageType, obj: dict) -> bytes:
    return encode_frame(msg_type, json.dumps(obj, separators=(",", ":")).encode("utf-8"))


def encode_error(text: str) -> bytes:
    return encode_frame(MessageType.ERROR, text.encode("utf-8")[:MAX_PAYLOAD])


def decode_json(payload: bytes) -> dict:
    """A CTL_* payload: a JSON object nested at most MAX_JSON_DEPTH deep; ProtocolError otherwise."""
    try:
        obj = json.loads(payload.decode("utf-8"))
    except RecursionError:  # deeper than the parser's own limit: refused below at any depth
        raise ProtocolError(f"JSON payload nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as e:  # bad UTF-8 or JSON, or an integer of more digits than int() takes
        raise ProtocolError(f"invalid JSON payload: {e}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("JSON payload is not an object")
    if _json_depth(obj) > MAX_JSON_DEPTH:
        raise ProtocolError(f"JSON payload nested deeper than {MAX_JSON_DEPTH} levels")
    return obj


def _json_depth(obj) -> int:
    """How deep objects and arrays nest in `obj` (1 for a flat object), counted without recursion;
    stops counting once past MAX_JSON_DEPTH."""
    deepest, todo = 0, [(obj, 1)]
    while todo and deepest <= MAX_JSON_DEPTH:
        value, depth = todo.pop()
        deepest = max(deepest, depth)
        items = value.values() if isinstance(value, dict) else value
        todo.extend((v, depth + 1) for v in items if isinstance(v, (dict, list)))
    return deepest


class FrameDecoder:
    """Incremental decoder: feed() bytes as they arrive, then take frames with next_frame()/frames().

    The header is checked as soon as its 12 bytes are in (an oversized length is refused before the
    payload is read). Raises ProtocolError on a malformed frame; the stream is then unusable.
    `pending` is the number of buffered bytes of an incomplete frame (non-zero at EOF = truncated).
    replies: a control client's decoder, which accepts a CTL_REPLY of up to MAX_CTL_REPLY bytes.
    """

    def __init__(self, replies: bool = False):
        self._buf = bytearray()
        self._failed: ProtocolError | None = None
        self._reply_max = MAX_CTL_REPLY if replies else MAX_PAYLOAD

    @property
    def pending(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next_frame(self) -> Frame | None:
        frame, end = self._frame_at(0)
        if end:
            del self._buf[:end]
        return frame

    def frames(self):
        """The complete frames buffered, in order, lazily (a consumer that stops early, e.g. at a
        message that closes the connection, leaves the rest unread). The consumed bytes are cut
        from the buffer once, when the iteration ends, not once per frame."""
        pos = 0
        try:
            while True:
                frame, end = self._frame_at(pos)
                if frame is None:
                    return
                pos = end
                yield frame
        finally:
            if pos:
                del self._buf[:pos]

    def _frame_at(self, pos: int) -> tuple[Frame | None, int]:
        """(the frame that starts at `pos` of the buffer, where it ends), or (None, 0) while it is
        incomplete. The header is checked as soon as it is in; ProtocolError if it is bad."""
        if self._failed:
            raise self._failed
        buf = self._buf
        if len(buf) - pos < _HEADER_SIZE:
            return None, 0
        magic, version, mtype, length = HEADER.unpack_from(buf, pos)
        size = _FIXED_SIZES.get(mtype)
        if magic != MAGIC or version != VERSION or (length != size and (
                size is not None or mtype not in _TYPES or length > MAX_PAYLOAD)):
            self._check_header(magic, version, mtype, length)  # the precise error, or a long reply
        end = pos + _HEADER_SIZE + length
        if len(buf) < end:
            return None, 0
        return Frame(_TYPES[mtype], bytes(buf[pos + _HEADER_SIZE:end])), end

    def _check_header(self, magic: int, version: int, mtype: int, length: int) -> None:
        """Raise the ProtocolError a bad header deserves (and keep it: the stream is unusable);
        return for a CTL_REPLY longer than MAX_PAYLOAD that this decoder accepts."""
        try:
            if magic != MAGIC:
                raise ProtocolError(f"bad magic 0x{magic:08x}")
            if version != VERSION:
                raise ProtocolError(f"unsupported protocol version {version}")
            if mtype not in _TYPES:
                raise ProtocolError(f"unknown message type {mtype}")
            mtype = _TYPES[mtype]
            limit = self._reply_max if mtype == MessageType.CTL_REPLY else MAX_PAYLOAD
            if length > limit:
                raise ProtocolError(f"payload length {length} exceeds {limit}")
            cls = PAYLOADS.get(mtype)
            if cls is not None and length != cls.SIZE:
                raise ProtocolError(f"{mtype.name} payload is {length} bytes, expected {cls.SIZE}")
        except ProtocolError as e:
            self._failed = e
            raise
