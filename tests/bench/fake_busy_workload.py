"""A stand-in for bench/observability/busy_workload.py without a GPU: a raw protocol client that reports GPU busy
time as the library would (BUSY_UPDATE), with the files busy_workload.py writes and waits for.
It claims 0.2 s of warm-up, then `--seconds` more of work, for which it counts kernels of kind
"add" that would take --seconds / FAKE_BUSY_RATIO at 1 ms each."""

import json
import os
import socket
import time

from xpushare.wire.protocol import (
    Attach, BusyUpdate, FrameDecoder, Hello, MessageType, encode,
)

from bench.observability.busy_workload import parse, wait_for  # noqa: E402


def expect(sock, decoder, mtype):
    while True:
        for frame in decoder.frames():
            assert frame.type == mtype, frame
            return frame.decode()
        decoder.feed(sock.recv(65536))


def main():
    args = parse()
    ratio = float(os.environ.get("FAKE_BUSY_RATIO", "1.0"))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ["NVSHARE_SOCK_PATH"])
    d = FrameDecoder()
    s.sendall(encode(Hello()))
    expect(s, d, MessageType.WELCOME)
    s.sendall(encode(Attach(0, 0, "GPU-00000000-0000-0000-0000-00000000b051", "Fake", 1 << 30, 1 << 30)))
    expect(s, d, MessageType.ATTACHED)
    time.sleep(0.3)
    s.sendall(encode(BusyUpdate(0, 0, 200_000_000)))  # the warm-up
    open(args.warm, "w").close()
    wait_for(args.go)
    time.sleep(args.seconds * 1.2)
    s.sendall(encode(BusyUpdate(0, 0, 200_000_000 + int(args.seconds * 1e9))))
    with open(args.ready, "w") as fh:
        json.dump({"pattern": args.pattern, "kind": "add", "kernels": args.seconds * 1e3 / ratio,
                   "wall_s": args.seconds * 1.2, "pid": os.getpid()}, fh)
    wait_for(args.done)


if __name__ == "__main__":
    main()
