"""xpushare.wire.protocol on its own: payload packing, frames, the incremental decoder."""

import pytest

from xpushare.wire.protocol import (
    HEADER, JOB_UNKNOWN, MAGIC, MAX_CTL_REPLY, MAX_PAYLOAD, VERSION, Attach, Attached, DropLock, FrameDecoder,
    Grant, Hello, Job, LockRequest, MemUpdate, Released, MessageType, ProtocolError, Welcome, decode_json, encode, encode_error, encode_frame,
    encode_json,
)

SAMPLES = [
    Hello(1, -5, "pod-a", "ns"),
    Welcome(2**63 + 1, VERSION, 0),
    Attach(3, 0, "GPU-00000000-0000-0000-0000-000000000001", "NVIDIA H100 80GB HBM3", 80 << 30, 16 << 30),
    Attached(3, 0, 16 << 30),
    Grant(1, 30000, 1, 0),
    LockRequest(2, 0),
    DropLock(1, 4, 1, 0),
    Released(1, 0, 12_000, 170_000, 40_000, 0),
    MemUpdate(0, 0, 5 << 30, 123),
    Job(2, "", 16, 8, 9, 1, "elastic-run", "10.0.0.1:29500"),
    Job(1, "", 0, 0, JOB_UNKNOWN, JOB_UNKNOWN, "train-a", ""),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_payload_round_trip_and_exact_size(msg):
    data = msg.pack()
    assert len(data) == type(msg).SIZE
    assert type(msg).unpack(data) == msg


def test_little_endian_packed_layout():
    data = encode(Grant(device=2, quantum_ms=500, flags=1))
    assert data == bytes.fromhex("4e565348" "0200" "0600" "10000000"
                                 "02000000" "f4010000" "01000000" "00000000")
    assert data[:4] == b"NVSH"


def test_strings_are_nul_padded_and_cut_at_a_character_boundary():
    h = Hello(pod_name="é" * 200)  # 400 bytes of UTF-8 into 256
    raw = h.pack()
    assert Hello.unpack(raw).pod_name == "é" * 128
    full = Attach(uuid="x" * 48)  # a full field has no terminating NUL
    assert Attach.unpack(full.pack()).uuid == "x" * 48


def test_each_fixed_payload_names_its_message_type():
    for msg, mtype in [(LockRequest(0, 0), MessageType.REQ_LOCK), (Grant(0, 1), MessageType.LOCK_OK),
                       (DropLock(1, 2, 1), MessageType.DROP_LOCK),
                       (Released(1, 0, 5), MessageType.LOCK_RELEASED),
                       (Job(1, name="x"), MessageType.JOB)]:
        (f,) = list(_decode(encode(msg)))
        assert f.type == mtype and f.decode() == msg


def _decode(data, chunk=None):
    d = FrameDecoder()
    out = []
    step = chunk or len(data) or 1
    for i in range(0, len(data), step):
        d.feed(data[i:i + step])
        out.extend(d.frames())
    assert d.pending == 0
    return out


def test_decoder_reassembles_frames_fed_byte_by_byte():
    stream = b"".join(encode(m) for m in SAMPLES) + encode_json(MessageType.CTL_REPLY, {"ok": True}) \
        + encode_error("boom")
    frames = _decode(stream, chunk=1)
    assert [f.decode() for f in frames[:-2]] == SAMPLES
    assert frames[-2].decode() == {"ok": True}
    assert frames[-1].decode() == "boom"


@pytest.mark.parametrize("raw, message", [
    (HEADER.pack(0x12345678, VERSION, 5, 8) + bytes(8), "bad magic"),
    (HEADER.pack(MAGIC, 9, 5, 8) + bytes(8), "version"),
    (HEADER.pack(MAGIC, VERSION, 0, 0), "unknown message type"),
    (HEADER.pack(MAGIC, VERSION, 99, 0), "unknown message type"),
    (HEADER.pack(MAGIC, VERSION, 10, MAX_PAYLOAD + 1), "exceeds"),
    (HEADER.pack(MAGIC, VERSION, 1, 519) + bytes(519), "expected 520"),
    (HEADER.pack(MAGIC, VERSION, 9, 25) + bytes(25), "expected 24"),
])
def test_decoder_rejects_malformed_headers_before_reading_the_payload(raw, message):
    d = FrameDecoder()
    d.feed(raw[:HEADER.size])  # the header alone is enough to refuse
    with pytest.raises(ProtocolError, match=message):
        d.next_frame()
    with pytest.raises(ProtocolError):  # and the stream stays failed
        d.next_frame()


def test_valid_frames_before_a_bad_one_are_delivered():
    d = FrameDecoder()
    d.feed(encode(Grant(0, 1)) + b"\xff" * 12)
    assert d.next_frame().decode() == Grant(0, 1)
    with pytest.raises(ProtocolError):
        d.next_frame()


def test_truncated_frame_stays_pending():
    d = FrameDecoder()
    d.feed(encode(MemUpdate(0, 0, 1, 2))[:-3])
    assert d.next_frame() is None and d.pending == HEADER.size + 21


def test_max_payload_is_accepted_and_encoder_refuses_more():
    big = encode_frame(MessageType.ERROR, b"x" * MAX_PAYLOAD)
    (f,) = _decode(big)
    assert len(f.payload) == MAX_PAYLOAD
    with pytest.raises(ProtocolError):
        encode_frame(MessageType.ERROR, b"x" * (MAX_PAYLOAD + 1))


def test_json_payloads_must_be_objects():
    assert decode_json(b'{"op": "status"}') == {"op": "status"}
    for bad in (b"[]", b"not json", b"\xff"):
        with pytest.raises(ProtocolError):
            decode_json(bad)


def test_only_a_control_client_accepts_a_control_reply_over_the_frame_limit():
    """The scheduler's own decoder refuses any frame over MAX_PAYLOAD, a CTL_REPLY too; a control
    client's accepts a CTL_REPLY of up to MAX_CTL_REPLY, and nothing else over MAX_PAYLOAD."""
    big = encode_frame(MessageType.CTL_REPLY, b"{" + b" " * MAX_PAYLOAD + b"}")
    client = FrameDecoder(replies=True)
    client.feed(big)
    assert client.next_frame().type == MessageType.CTL_REPLY
    scheduler_side = FrameDecoder()
    scheduler_side.feed(big)
    with pytest.raises(ProtocolError, match="exceeds 65536"):
        scheduler_side.next_frame()
    other = FrameDecoder(replies=True)
    other.feed(HEADER.pack(MAGIC, VERSION, int(MessageType.ERROR), MAX_PAYLOAD + 1))
    with pytest.raises(ProtocolError, match="exceeds 65536"):
        other.next_frame()
    with pytest.raises(ProtocolError, match="exceeds"):
        encode_frame(MessageType.CTL_REPLY, b" " * (MAX_CTL_REPLY + 1))


def test_job_layout_is_the_documented_one():
    """docs/protocol.md, `job`: kind at 0, the four u32 from 4, name at 20, rendezvous at 148."""
    raw = Job(2, "", 4, 2, 3, 1, "run", "h:1").pack()
    assert len(raw) == 276
    assert raw[0] == 2 and raw[1:4] == bytes(3)
    assert raw[4:20] == bytes.fromhex("04000000" "02000000" "03000000" "01000000")
    assert raw[20:23] == b"run" and raw[23:148] == bytes(125)
    assert raw[148:151] == b"h:1" and raw[151:] == bytes(125)
    assert Job().rank == Job().local_rank == 0xFFFFFFFF
