"""A scheduler client in its own process (own pid and command line), for status and kill tests.

usage: client_proc.py SOCKET UUID [--mem MANAGED OTHER] [--lock]
Prints one line when registered ("registered") and, with --lock, one when granted ("granted");
then waits until stdin closes.
"""

import sys


from sched_harness import FakeClient  # noqa: E402
from xpushare.wire.protocol import MessageType  # noqa: E402


def main():
    sock, gpu = sys.argv[1], sys.argv[2]
    c = FakeClient(sock)
    c.hello(priority=3, pod_name="trainer-0", pod_namespace="ml")
    c.attach(0, gpu)
    if "--mem" in sys.argv:
        i = sys.argv.index("--mem")
        c.mem_update(0, int(sys.argv[i + 1]), int(sys.argv[i + 2]))
    print("registered", flush=True)
    if "--lock" in sys.argv:
        c.request(0)
        c.expect(MessageType.LOCK_OK, timeout=30)
        print("granted", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
