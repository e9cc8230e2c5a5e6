"""Property tests of the frame decoder and the JSON payloads: whatever bytes arrive, in whatever
pieces, FrameDecoder yields frames or raises ProtocolError, and a frame's decode() gives its payload
or raises ProtocolError; nothing else (no RecursionError, ValueError or struct.error)."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xpushare.wire.protocol import (
    HEADER, MAX_JSON_DEPTH, MAX_PAYLOAD, Attach, Frame, FrameDecoder, Hello, Job,
    LockRequest, MemUpdate, MessageType, ProtocolError, Released, decode_json, encode,
    encode_frame, encode_json,
)

FUZZ = settings(max_examples=300, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])

VALID = [
    encode(Hello(0, 5, "pod", "ns")),
    encode(Attach(0, 0, "GPU-1", "Mock", 1 << 34, 1 << 34)),
    encode(LockRequest(0, 0)),
    encode(Released(0, 0, 1, 2, 3)),
    encode(MemUpdate(0, 0, 1 << 30, 1 << 20)),
    encode(Job(2, "", 8, 4, 5, 1, "run-1", "10.0.0.1:29500")),
    encode_json(MessageType.CTL_REQUEST, {"op": "set_tq", "seconds": 5, "gpu": 0}),
    encode_json(MessageType.CTL_REPLY, {"ok": True, "gpus": [{"holders": [{"pid": 1}]}]}),
    encode_frame(MessageType.ERROR, "évincé".encode()),
]


def _decode_all(chunks: list[bytes]) -> None:
    """Feed the chunks; every frame must decode or raise ProtocolError, the stream likewise."""
    d = FrameDecoder()
    try:
        for chunk in chunks:
            d.feed(chunk)
            for frame in d.frames():
                assert isinstance(frame, Frame) and len(frame.payload) <= MAX_PAYLOAD
                try:
                    frame.decode()
                except ProtocolError:
                    pass
    except ProtocolError:
        with pytest.raises(ProtocolError):  # a failed stream stays failed
            d.next_frame()


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)])]


@FUZZ
@given(st.binary(max_size=2048), st.lists(st.integers(0, 4096), max_size=8))
def test_random_bytes_give_frames_or_a_protocol_error(data, cuts):
    _decode_all(_chunks(data, cuts))


@FUZZ
@given(st.lists(st.sampled_from(VALID), min_size=1, max_size=6),
       st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=6),
       st.integers(0, 10**6), st.lists(st.integers(0, 4096), max_size=8))
def test_mutated_valid_frames_give_frames_or_a_protocol_error(frames, flips, cut, cuts):
    data = bytearray(b"".join(frames))
    for pos, byte in flips:
        data[pos % len(data)] = byte
    data = bytes(data[:len(data) - cut % 16])  # sometimes truncated
    _decode_all(_chunks(data, cuts))


@FUZZ
@given(st.lists(st.sampled_from(VALID), min_size=1, max_size=6), st.lists(st.integers(0, 4096)))
def test_valid_frames_decode_identically_in_any_pieces(frames, cuts):
    d = FrameDecoder()
    out = []
    for chunk in _chunks(b"".join(frames), cuts):
        d.feed(chunk)
        out.extend(f.type for f in d.frames())
    assert [HEADER.unpack_from(f)[2] for f in frames] == out and d.pending == 0


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c,
                                                                         max_size=4),
                    max_leaves=20)


def _depth(value) -> int:
    if isinstance(value, dict):
        value = list(value.values())
    return 1 + max(map(_depth, value), default=0) if isinstance(value, list) else 0


@FUZZ
@given(JSON)
def test_json_payloads_decode_to_their_object_or_a_protocol_error(value):
    payload = json.dumps(value).encode()
    try:
        obj = decode_json(payload)
    except ProtocolError:
        assert not isinstance(value, dict) or _depth(value) > MAX_JSON_DEPTH
        return
    assert isinstance(obj, dict) and json.dumps(obj) == json.dumps(value)


@FUZZ
@given(st.binary(max_size=512) | st.text(alphabet="[]{}\":,0123456789 \\-e.tfnrul", max_size=512)
       .map(str.encode))
def test_junk_payloads_give_an_object_or_a_protocol_error(payload):
    try:
        assert isinstance(decode_json(payload), dict)
    except ProtocolError:
        pass


# -- the attacks of the hardening issue --------------------------------------------------------

@pytest.mark.parametrize("payload", [b"[" * MAX_PAYLOAD, b'{"a":' * (MAX_PAYLOAD // 5),
                                     b'{"op":' + b"[" * 5000 + b"]" * 5000 + b"}"],
                         ids=["arrays", "objects", "closed"])
def test_attack_deeply_nested_json_is_a_protocol_error(payload):
    """It raised RecursionError, which the daemon logged with a traceback as an internal error."""
    with pytest.raises(ProtocolError, match="nested deeper than"):
        decode_json(payload)


def test_attack_integer_literal_too_long_for_int_is_a_protocol_error():
    """json raised ValueError (int's 4300-digit limit): an internal error too."""
    with pytest.raises(ProtocolError, match="invalid JSON payload"):
        decode_json(b'{"op":"set_tq","seconds":' + b"9" * 5000 + b"}")


def test_nesting_up_to_the_limit_is_accepted_and_one_more_is_refused():
    def nested(depth):
        obj = {}
        for _ in range(depth - 1):
            obj = {"a": obj}
        return json.dumps(obj).encode()
    assert decode_json(nested(MAX_JSON_DEPTH))
    with pytest.raises(ProtocolError, match="nested deeper than"):
        decode_json(nested(MAX_JSON_DEPTH + 1))
