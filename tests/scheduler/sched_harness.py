"""Helpers for tests that talk to a real nvshare-scheduler process.

SchedulerProcess starts `python -m xpushare.scheduler` on a temporary socket (testkit.scheduler); FakeClient speaks the
wire protocol the way libnvshare.so does, with blocking sockets and timeouts.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"

from xpushare.wire.protocol import (  # noqa: E402
    Attach, BusyUpdate, Frame, LockRequest, Released, FrameDecoder, Hello, MemUpdate, MessageType, ProtocolError,
    Residency, encode, encode_frame, encode_json,
)
from testkit import scheduler as testkit_scheduler  # noqa: E402

GiB = 1 << 30
FAKE_NVML = Path(__file__).resolve().parent / "fake_nvml"


def uuid(i: int) -> str:
    return f"GPU-00000000-0000-0000-0000-{i:012x}"


def child_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH")
                                                      else []))
    env.pop("NVSHARE_SOCK_PATH", None)
    env.update(extra or {})
    return env


def make_socket_dir() -> Path:
    """A fresh directory under /tmp that other uids can traverse (pytest's tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="nvs-test-"))
    d.chmod(0o755)
    return d


class SchedulerProcess(testkit_scheduler.SchedulerProcess):
    """The scheduler with this checkout's package; nvml: GPUs for the fake pynvml (put first on the
    path); the log next to the socket unless logfile is given."""

    def __init__(self, sock: Path, args=(), env: dict | None = None, nvml: list | None = None,
                 logfile: Path | None = None):
        extra = dict(env or {})
        if nvml is not None:  # put the fake pynvml first on the path
            import json
            extra["FAKE_NVML_GPUS"] = json.dumps(nvml)
            extra["PYTHONPATH"] = os.pathsep.join([str(FAKE_NVML), str(SRC)])
        super().__init__(sock, args, child_env(extra), logfile)

    @property
    def logfile(self) -> Path:
        return self.log_path


class FakeClient:
    """A scheduler client written against docs/protocol.md."""

    def __init__(self, sock: Path, timeout: float = 5.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(sock))
        self.decoder = FrameDecoder(replies=True)  # a control reply may be up to MAX_CTL_REPLY
        self.client_id = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.sock.close()

    # raw I/O
    def send_raw(self, data: bytes):
        self.sock.sendall(data)

    def send(self, msg_type, payload=b""):
        self.sock.sendall(encode_frame(msg_type, payload))

    def recv(self, timeout: float = 5.0) -> Frame | None:
        """The next frame; None on EOF; socket.timeout if nothing came."""
        self.sock.settimeout(timeout)
        while (frame := self.decoder.next_frame()) is None:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.decoder.feed(data)
        return frame

    def expect(self, msg_type: MessageType, timeout: float = 5.0):
        frame = self.recv(timeout)
        assert frame is not None, f"connection closed while waiting for {msg_type.name}"
        assert frame.type == msg_type, f"expected {msg_type.name}, got {frame.type.name}: {frame}"
        return frame.decode()

    def nothing_sent(self) -> bool:
        """True when the scheduler has sent this client nothing up to now (else AssertionError).

        The witness is a status round trip on this connection: the scheduler handles a connection's
        messages in order and writes its frames in order, so whatever it decided to send here while
        handling what came before the request arrives before the reply. (To cover a decision another
        connection's message triggered, first do the round trip on that connection.)"""
        self.ctl("status")
        return True

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """Drain frames until EOF; True if the scheduler closed the connection."""
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.recv(max(0.01, deadline - time.monotonic())) is None:
                    return True
        except (socket.timeout, TimeoutError):
            return False
        except (ConnectionResetError, ProtocolError):
            return True
        return False

    # protocol steps
    def hello(self, priority=0, pod_name="", pod_namespace="", flags=0):
        self.send_raw(encode(Hello(flags, priority, pod_name, pod_namespace)))
        welcome = self.expect(MessageType.WELCOME)
        self.client_id = welcome.client_id
        self.hello_reply = welcome
        return welcome

    def attach(self, device=0, gpu_uuid=None, name="Mock GPU", physical=16 * GiB, capacity=None):
        self.send_raw(encode(Attach(device, 0, gpu_uuid or uuid(device), name, physical,
                                    physical if capacity is None else capacity)))
        return self.expect(MessageType.ATTACHED)

    def request(self, device=0):
        self.send_raw(encode(LockRequest(device, 0)))

    def release(self, device=0, reason=0, drain_us=0, evict_us=0, prefetch_us=0):
        self.send_raw(encode(Released(device, reason, drain_us, evict_us, prefetch_us)))

    def mem_update(self, device=0, managed=0, other=0):
        self.send_raw(encode(MemUpdate(device, 0, managed, other)))

    def busy_update(self, device=0, busy_ns=0):
        self.send_raw(encode(BusyUpdate(device, 0, busy_ns)))

    def residency(self, device=0, flags=0, resident=0, host=0, move_us=0):
        self.send_raw(encode(Residency(device, flags, resident, host, move_us)))

    def ctl(self, op, **fields) -> dict:
        self.send_raw(encode_json(MessageType.CTL_REQUEST, {"op": op, **fields}))
        return self.expect(MessageType.CTL_REPLY)


def _hidden_from_others() -> str | None:
    """The first of the places a child of another user imports from (this checkout's src/, the
    standard library, site-packages) that others cannot read, or None."""
    import stat
    import sysconfig
    for place in (SRC, Path(os.__file__).parent, Path(sysconfig.get_paths()["purelib"])):
        for p in (place, *place.parents):
            mode = p.stat().st_mode
            if not mode & stat.S_IXOTH or (p == place and not mode & stat.S_IROTH):
                return str(p)
    return None


def as_user(uid: int, gid: int, fn, *args):
    """Run fn(*args) in a forked child that switched to uid/gid (needs root); return its result
    (a Python literal) or raise what it raised, as an AssertionError with the text. Skips where
    the child could not import what it needs because it lies under a private directory (a
    checkout or a Python under a 0700 home)."""
    import ast
    import traceback
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            out = repr(("ok", fn(*args)))
        except BaseException:
            out = repr(("error", traceback.format_exc()))
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    kind, value = ast.literal_eval(data.decode())
    hidden = _hidden_from_others() if kind != "ok" and "ModuleNotFoundError" in value else None
    if hidden:  # what it imports lies under a private directory: not the code under test's fault
        pytest.skip(f"uid {uid} cannot read {hidden} (not world-readable): run the suite from a "
                    "checkout and a Python that other users can read")
    if kind != "ok":
        raise AssertionError(f"child failed:\n{value}")
    return value


def registered(sock: Path, devices=(0,), **hello) -> FakeClient:
    c = FakeClient(sock)
    c.hello(**hello)
    for d in devices:
        c.attach(d)
    return c



class LimitedScheduler(SchedulerProcess):
    """The scheduler started with RLIMIT_NOFILE = nofile, soft and hard (so it cannot raise it)."""

    def __init__(self, sock: Path, nofile: int, args=(), env: dict | None = None):
        super().__init__(sock, args, env)
        self.nofile = nofile

    def start(self, wait: bool = True, timeout: float = 20.0) -> "LimitedScheduler":
        import resource
        import subprocess

        def limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "xpushare.scheduler", *self.args],
                                         stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env, preexec_fn=limit)
        if wait:
            self.wait_ready(timeout)
        return self


def vm_rss(pid: int) -> int:
    """The process's resident set size in bytes (/proc/PID/status VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


class HeldAsUser:
    """Like as_user, but the child keeps running, holding what fn returned second, until the with
    block ends: `with HeldAsUser(uid, gid, fn, *args) as result:`; fn returns (result, kept)."""

    def __init__(self, uid: int, gid: int, fn, *args):
        self.uid, self.gid, self.fn, self.args = uid, gid, fn, args
        self.pid = None

    def __enter__(self):
        import ast
        import traceback
        r, w = os.pipe()
        self._hold_r, self._hold_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # child
            try:
                os.close(r)
                os.close(self._hold_w)
                os.setgroups([])
                os.setgid(self.gid)
                os.setuid(self.uid)
                result, kept = self.fn(*self.args)
                out = repr(("ok", result))
            except BaseException:
                kept, out = None, repr(("error", traceback.format_exc()))
            os.write(w, out.encode())
            os.close(w)
            os.read(self._hold_r, 1)  # until the parent's with block ends
            os._exit(0)
        os.close(w)
        os.close(self._hold_r)
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        os.close(r)
        kind, value = ast.literal_eval(data.decode())
        if kind != "ok":
            self.__exit__()
            raise AssertionError(f"child failed:\n{value}")
        return value

    def __exit__(self, *exc):
        os.close(self._hold_w)
        os.waitpid(self.pid, 0)


class ConnectedAs:
    """n FakeClients whose connections another uid made: a forked child switches to uid/gid,
    connects (the scheduler takes the peer's pid and uid at the connect), hands the sockets back
    over SCM_RIGHTS and stays alive (its pid is theirs) until the with block ends:
    `with ConnectedAs(uid, gid, sock, n) as clients:`."""

    def __init__(self, uid: int, gid: int, sock: Path, n: int = 1):
        self.uid, self.gid, self.sock, self.n = uid, gid, sock, n
        self.pid = None
        self.clients: list[FakeClient] = []

    def __enter__(self) -> list[FakeClient]:
        parent, child = socket.socketpair()
        self.pid = os.fork()
        if self.pid == 0:  # child
            code = 0
            try:
                parent.close()
                os.setgroups([])
                os.setgid(self.gid)
                os.setuid(self.uid)
                made = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(self.n)]
                for s in made:
                    s.connect(str(self.sock))
                socket.send_fds(child, [b"x"], [s.fileno() for s in made])
                child.recv(1)  # until the parent's with block ends
            except BaseException:
                code = 1
            os._exit(code)
        child.close()
        self._hold = parent
        _, fds, _, _ = socket.recv_fds(parent, 1, self.n)
        assert len(fds) == self.n, "the child could not connect as its uid"
        for fd in fds:
            c = FakeClient.__new__(FakeClient)
            c.sock = socket.socket(fileno=fd)
            c.decoder = FrameDecoder(replies=True)
            c.client_id = None
            self.clients.append(c)
        return self.clients

    def __exit__(self, *exc):
        for c in self.clients:
            c.close()
        self._hold.close()
        os.waitpid(self.pid, 0)
