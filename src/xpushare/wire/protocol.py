"""The XPUShare wire protocol, version 2 (docs/protocol.md is the definition): frames.

Frames are a 12-byte little-endian header (magic, version, type, length) and `length` payload bytes.
Fixed payloads are packed structs (messages.py, the message set that native/src/session/protocol.h
mirrors); CTL_REQUEST/CTL_REPLY carry a JSON object, ERROR UTF-8 text. This module encodes and
decodes frames and re-exports the message set, so that callers need one import.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from .messages import (  # noqa: F401  (re-exported: the protocol's names live in one namespace)
    BUSY_SPANS_MAX, COMPUTE_LIMIT_SCALE, COMPUTE_SHARE_SCALE, DROP_EVICT, DROP_GANG, EVICT_ROOM, FEATURE_BUSY,
    FEATURE_BUSY_SPANS, FEATURE_JOBS, FEATURE_QUOTAS, FEATURE_SWAP, GRANT_PREFETCH, HEADER, HEADER_FIELDS,
    HELLO_REQUIRE_SCHEDULER, HELLO_SWAP, JOB_EXPLICIT, JOB_TORCH, JOB_UNKNOWN, MAGIC,
    MAX_CTL_REPLY, MAX_JSON_DEPTH, MAX_PAYLOAD, PAYLOADS, PRIORITY_LIMIT, RESIDENCY_ANSWER,
    RESIDENCY_REFUSED, VERSION, Attach, Attached, BusySpans, BusyUpdate, DropLock, DropReason, Evict, Grant,
    Hello, Job, Limits, LockRequest, MemUpdate, MessageType, ProtocolError, Released,
    ReleaseReason, Residency, Settings, Welcome, _Payload, field_layout,
    FEATURE_SUSPEND, HELLO_SUSPEND, HELLO_LATENCY_SENSITIVE, HELLO_QUEUE_BOUND, QueueBound, ResumeRequest,
    HELLO_HOLD, Burst, Bursts, Hold, Resumed, Suspend, SuspendReady, SuspendStatus,
    HELLO_PIN_AHEAD, PrepareSwap,
    HELLO_WAITERS, Waiters, HELLO_MOVE, SUSPEND_MOVE, RESUMED_MOVED,
)

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


def encode_frame(msg_type: MessageType | int,
                 payload: bytes | _Payload | list[bytes] = b"") -> bytes:
    """payload: bytes, a payload dataclass, or the payload's pieces in order (joined once, with the
    header: a large reply is copied one time, not two)."""
    if isinstance(payload, _Payload):
        payload = payload.pack()
    return b"".join(frame_pieces(msg_type, payload if isinstance(payload, list) else [payload]))


def frame_pieces(msg_type: MessageType | int, pieces: list[bytes]) -> list[bytes]:
    """A frame as its header and the payload's pieces, not joined: a large reply written a piece
    at a time is never copied whole (Conn.send_pieces)."""
    size = sum(map(len, pieces))
    limit = MAX_CTL_REPLY if msg_type == MessageType.CTL_REPLY else MAX_PAYLOAD
    if size > limit:
        raise ProtocolError(f"payload of {size} bytes exceeds {limit}")
    return [HEADER.pack(MAGIC, VERSION, int(msg_type), size), *pieces]


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
        # What failed, as text: the exception itself, kept, would hold its traceback's frames, and
        # they this decoder (a cycle left for the collector at every malformed frame).
        self._failed: str | None = None
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
            raise ProtocolError(self._failed)
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
            self._failed = str(e)
            raise
