"""Clients of a live scheduler in processes of their own, so that status shows their own pids and
(long) command lines: for the nvsharectl status and top width tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sched_harness import GiB, child_env, uuid  # noqa: E402

HARNESS = Path(__file__).resolve().parents[1] / "scheduler"
LONG_ARGS = ["--config=/srv/experiments/very-long-project-name/configs/fine-tune-with-many-options.yaml",
             "--output-dir=/srv/experiments/very-long-project-name/runs/2026-11-24T01-00-00Z",
             *[f"--flag-number-{i}=value-{i}" for i in range(20)]]
TWO_GPUS = [{"uuid": uuid(0), "name": "Fake H100 80GB HBM3", "memory": 80 * GiB},
            {"uuid": uuid(1), "name": "Fake H100 80GB HBM3", "memory": 80 * GiB}]

class LiveClient:
    """A client process: action hold (gets the lock), wait (asks for it) or idle."""

    def __init__(self, sock, mem: int, action: str, pod: str = ""):
        self.proc = subprocess.Popen([sys.executable, __file__, str(sock), str(mem), action, pod,
                                      *LONG_ARGS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=child_env(), text=True)
        assert self.proc.stdout.readline().strip() == "ready"
        self.pid = self.proc.pid

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(10)


def start_clients(sock) -> list[LiveClient]:
    """A holder in a pod (hint), a waiter and an idle client, each with a long command line."""
    return [LiveClient(sock, 5 * GiB, "hold", "ml/trainer-with-a-long-name-0"),
            LiveClient(sock, 3 * GiB, "wait"), LiveClient(sock, 1 * GiB, "idle")]


def _main():
    from sched_harness import registered
    from xpushare.wire.protocol import MessageType
    sock, mem, action, pod = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    ns, _, name = pod.partition("/")
    c = registered(sock, pod_namespace=ns, pod_name=name)
    c.mem_update(0, mem, 0)
    if action != "idle":
        c.request()
    if action == "hold":
        c.expect(MessageType.LOCK_OK)
    print("ready", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    _main()
