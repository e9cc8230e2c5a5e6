"""The asyncio shell around the policy core: a Unix socket server speaking docs/protocol.md.

Per connection it reads the peer's pid/uid/gid with SO_PEERCRED, decodes frames incrementally and
dispatches them by type. Lock messages and timer deadlines become calls on the GPU's policy.Arbiter;
the actions it returns become LOCK_OK / DROP_LOCK frames, evictions (ERROR, then the connection is
closed) and log lines. A malformed frame (or a
message that breaks the protocol's order) gets an ERROR and closes that connection only.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..paths import ensure_socket_dir
from ..protocol import (
    DROP_EVICT, GRANT_PREFETCH, MAX_PAYLOAD, PRIORITY_LIMIT, VERSION, Attach, Attached, DropLock, Frame,
    FrameDecoder, Grant, Hello, LockRequest, MemUpdate, MessageType, ProtocolError, Released,
    ReleaseReason, Welcome, encode, encode_error, encode_json, socket_answers,
)
from .gpus import GpuInfo
from . import policy
from .policy import TQ_MAX, Arbiter, Mode, SwitchReport, check_tq

log = logging.getLogger("nvshare.scheduler")

_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
COMMAND_MAX = 256  # characters of a client's command line in status (a reply is one 64 KiB frame)
COMMAND_SHORT = 32  # ... when the reply would not fit otherwise


@dataclass
class Config:
    socket_path: Path
    tq: float | None = None                               # None = the dynamic quantum
    mode: Mode = Mode.AUTO
    reserve: int | None = None                            # --reserve; None = the policy's default
    gpu_memory: int = 0                                   # --gpu-memory SIZE: every GPU
    gpu_memory_for: dict[str, int] = field(default_factory=dict)  # --gpu-memory SEL=SIZE
    admin_gid: int | None = None                          # --admin-group


class CtlError(Exception):
    """A control request that cannot be carried out; its text goes back as `error`."""


class Gpu:
    """One GPU: what is known of it and its arbiter."""

    def __init__(self, uuid: str, index: int | None, name: str, memory_total: int,
                 mode: Mode, tq: float | None, capacity_override: int = 0,
                 reserve: int | None = None):
        self.uuid, self.index, self.name, self.memory_total = uuid, index, name, memory_total
        self.capacity_override = capacity_override  # --gpu-memory / set_gpu_memory; 0 = none
        self.reported_capacity = 0                  # the first capacity a client reported
        self.arbiter = Arbiter(mode, tq, reserve=reserve)
        self.timer: asyncio.TimerHandle | None = None

    @property
    def capacity(self) -> int:
        """Own setting, else the NVML total, else the first client report (docs/protocol.md)."""
        return self.capacity_override or self.memory_total or self.reported_capacity

    @property
    def label(self) -> str:
        return str(self.index) if self.index is not None else self.uuid

    def matches(self, sel) -> bool:
        if isinstance(sel, int) or (isinstance(sel, str) and sel.isdigit()):
            return self.index is not None and self.index == int(sel)
        return self.uuid.lower() == str(sel).lower()


class Conn:
    """One connection: a client process (after HELLO) or an nvsharectl session."""

    def __init__(self, cid: int, writer: asyncio.StreamWriter, pid: int, uid: int, gid: int):
        self.id, self.writer, self.pid, self.uid, self.gid = cid, writer, pid, uid, gid
        self.hello: Hello | None = None
        self.priority = 0                         # HELLO's, until set_priority changes it
        self.ctl = False
        self.devices: dict[int, Gpu] = {}         # client ordinal -> GPU
        self.memory: dict[str, tuple[int, int]] = {}  # uuid -> (managed_bytes, other_bytes)
        self.command = _cmdline(pid)

    def ordinal(self, gpu: Gpu) -> int:
        return next(dev for dev, g in self.devices.items() if g is gpu)

    def send(self, data: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(data)

    def close(self) -> None:
        """End the connection; its read loop then sees EOF and the scheduler forgets the client.

        Data the peer does not read (a stopped process) must not hold the connection open, so a
        transport with unsent data is aborted rather than closed.
        """
        transport = self.writer.transport
        if transport.get_write_buffer_size():
            transport.abort()
        else:
            self.writer.close()

    def __repr__(self):
        return f"<client {self.id} pid {self.pid}>"


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    text = " ".join(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a)
    return "".join(ch if ch.isprintable() else " " for ch in text)  # one line in logs and tables


def _groups(pid: int, gid: int) -> set[int]:
    groups = {gid}
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Groups:"):
                groups.update(int(g) for g in line.split()[1:])
    return groups


class PodLookup:
    """pid -> pod identity through xpushare.kubernetes.podidentity, when that module is there."""

    def __init__(self):
        self._fn = None
        self._loaded = False
        self._cache: dict[int, object] = {}

    def __call__(self, pid: int):
        if not self._loaded:
            self._loaded = True
            try:
                from ..kubernetes.podidentity import pod_identity
                self._fn = pod_identity
            except ImportError:
                log.debug("pod identity: xpushare.kubernetes.podidentity not available")
        if self._fn is None:
            return None
        if pid not in self._cache:
            try:
                self._cache[pid] = self._fn(pid)
            except Exception as e:  # never let a lookup take the daemon down
                log.debug("pod identity of pid %d failed: %s", pid, e)
                self._cache[pid] = None
        return self._cache[pid]

    def forget(self, pid: int) -> None:
        self._cache.pop(pid, None)


class Scheduler:
    def __init__(self, config: Config, gpus: list[GpuInfo] = ()):
        self.config = config
        self.default_mode = Mode(config.mode)
        self.default_tq = None if config.tq is None else check_tq(config.tq)
        self.gpus: dict[str, Gpu] = {}
        self.conns: set[Conn] = set()
        self._ids = itertools.count(1)
        self._pods = PodLookup()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        for info in gpus:
            self._add_gpu(info.uuid, info.index, info.name, info.memory_total)

    # -- GPUs and the policy -----------------------------------------------------------------
    def _add_gpu(self, uuid: str, index: int | None, name: str, memory_total: int,
                 reported_capacity: int = 0) -> Gpu:
        gpu = Gpu(uuid, index, name, memory_total, self.default_mode, self.default_tq,
                  reserve=self.config.reserve)
        gpu.capacity_override = next((size for sel, size in self.config.gpu_memory_for.items()
                                      if gpu.matches(sel)), self.config.gpu_memory)
        gpu.reported_capacity = reported_capacity
        self.gpus[uuid] = gpu
        self._capacity_changed(gpu)
        log.info("gpu %s: %s, %s, capacity %d bytes, mode %s, tq %s",
                 gpu.label if index is not None else "(from a client)", uuid, name or "?",
                 gpu.capacity, gpu.arbiter.mode.value, _tq_text(gpu.arbiter))
        return gpu

    def _capacity_changed(self, gpu: Gpu) -> None:
        """Tell the arbiter the GPU's capacity (auto admission and eviction decisions use it)."""
        if self._loop is None:  # before serving: no clients, so no actions
            gpu.arbiter.set_capacity(gpu.capacity, 0.0)
        else:
            self._policy(gpu, "set_capacity", gpu.capacity)

    def now(self) -> float:
        return self._loop.time()

    def _clients_on(self, gpu: Gpu) -> list[Conn]:
        return [c for c in self.conns if gpu in c.devices.values()]

    def _policy(self, gpu: Gpu, method: str, *args, **kw) -> None:
        """Call an Arbiter method with the current time and carry out the actions it returns.

        The arbiter has already recorded every action it returns, so each one is carried out even
        when another fails; a client that could not be told what the arbiter decided (e.g. a grant
        it never received) loses its connection, which hands its lock on instead of leaving it
        stuck. The timer is re-armed whatever happens.
        """
        try:
            for a in getattr(gpu.arbiter, method)(*args, self.now(), **kw):
                try:
                    self._carry_out(gpu, a)
                except Exception:  # a bug of ours: lose this client, never the other actions
                    log.exception("pid=%d gpu=%s: cannot carry out %s; closing its connection",
                                  a.client.pid, gpu.label, type(a).__name__.lower())
                    with contextlib.suppress(Exception):
                        a.client.close()
        finally:
            self._arm(gpu)

    def _carry_out(self, gpu: Gpu, a: policy.Action) -> None:
        conn: Conn = a.client
        if isinstance(a, policy.Grant):
            conn.send(encode(Grant(conn.ordinal(gpu), int(round(a.quantum * 1000)),
                                   GRANT_PREFETCH if a.prefetch else 0)))
            log.info("grant pid=%d gpu=%s quantum=%s prefetch=%s", conn.pid, gpu.label,
                     f"{a.quantum:g}s" if a.quantum else "none", _yes(a.prefetch))
        elif isinstance(a, policy.Drop):
            conn.send(encode(DropLock(conn.ordinal(gpu), int(a.reason),
                                      DROP_EVICT if a.evict else 0)))
            log.info("drop pid=%d gpu=%s reason=%s evict=%s", conn.pid, gpu.label,
                     a.reason.name.lower(), _yes(a.evict))
        elif isinstance(a, policy.Overdue):
            log.warning("pid=%d gpu=%s has not released %.1fs after DROP_LOCK (still draining?)",
                        conn.pid, gpu.label, a.waited)
        elif isinstance(a, policy.Evict):
            # The arbiter has taken the lock away; the client learns it by losing the connection
            # (its library then runs ungated with a warning and reconnects).
            log.warning("evict pid=%d gpu=%s after %.1fs without LOCK_RELEASED; closing its "
                        "connection", conn.pid, gpu.label, a.waited)
            conn.send(encode_error(f"evicted from gpu {gpu.uuid}: no LOCK_RELEASED "
                                   f"{a.waited:.1f}s after DROP_LOCK"))
            conn.close()

    def _arm(self, gpu: Gpu) -> None:
        if gpu.timer is not None:
            gpu.timer.cancel()
            gpu.timer = None
        deadline = gpu.arbiter.next_deadline()
        if deadline is not None:
            gpu.timer = self._loop.call_at(deadline, self._policy, gpu, "tick")

    # -- connections ---------------------------------------------------------------------------
    async def _serve_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        sock = writer.get_extra_info("socket")
        pid, uid, gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                         _PEERCRED.size))
        conn = Conn(next(self._ids), writer, pid, uid, gid)
        self.conns.add(conn)
        log.debug("connect pid=%d uid=%d client=%d", pid, uid, conn.id)
        decoder = FrameDecoder()
        try:
            while True:
                data = await reader.read(1 << 17)
                if not data:
                    if decoder.pending:
                        log.warning("pid=%d: connection closed inside a frame (%d bytes pending)",
                                    pid, decoder.pending)
                    break
                decoder.feed(data)
                for frame in decoder.frames():
                    self._dispatch(conn, frame)
        except ProtocolError as e:
            log.warning("pid=%d: protocol error: %s; closing its connection", pid, e)
            conn.send(encode_error(f"protocol error: {e}"))
        except (ConnectionError, OSError) as e:
            log.debug("pid=%d: connection error: %s", pid, e)
        except Exception:  # a bug of ours: lose this connection, not the daemon
            log.exception("pid=%d: internal error; closing its connection", pid)
            conn.send(encode_error("internal scheduler error"))
        finally:
            self._forget(conn)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    def _forget(self, conn: Conn) -> None:
        self.conns.discard(conn)
        if conn.hello is not None:
            held = [g.label for g in conn.devices.values() if conn in g.arbiter.holders]
            log.info("disconnect pid=%d client=%d%s", conn.pid, conn.id,
                     f" (held gpu {','.join(held)})" if held else "")
        for gpu in set(conn.devices.values()):
            self._policy(gpu, "disconnect", conn)
        if not any(c.pid == conn.pid for c in self.conns):
            self._pods.forget(conn.pid)

    def _dispatch(self, conn: Conn, frame: Frame) -> None:
        handler = self._handlers.get(frame.type)
        if handler is None:
            raise ProtocolError(f"unexpected {frame.type.name} from a client")
        log.debug("pid=%d -> %s", conn.pid, frame.type.name)
        handler(self, conn, frame.decode())

    def _client(self, conn: Conn) -> None:
        if conn.hello is None:
            raise ProtocolError("HELLO must come first")

    def _device(self, conn: Conn, dev: int) -> Gpu | None:
        gpu = conn.devices.get(dev)
        if gpu is None:
            log.warning("pid=%d: device %d was never attached; ignored", conn.pid, dev)
            conn.send(encode_error(f"device {dev} is not attached"))
        return gpu

    def _on_hello(self, conn: Conn, msg: Hello) -> None:
        if conn.hello is not None or conn.ctl:
            raise ProtocolError("HELLO sent twice, or on a control connection")
        conn.hello = msg
        conn.priority = max(-PRIORITY_LIMIT, min(PRIORITY_LIMIT, msg.priority))
        conn.send(encode(Welcome(conn.id, VERSION, 0)))
        log.info("client pid=%d uid=%d client=%d priority=%d: %s", conn.pid, conn.uid, conn.id,
                 msg.priority, conn.command[:120])

    def _on_attach(self, conn: Conn, msg: Attach) -> None:
        self._client(conn)
        reported = msg.capacity or msg.physical_memory
        gpu = self.gpus.get(msg.uuid)
        if gpu is None:
            gpu = self._add_gpu(msg.uuid, None, msg.name, 0, reported)
        gpu.name = gpu.name or msg.name
        if not gpu.reported_capacity:
            gpu.reported_capacity = reported
            self._capacity_changed(gpu)
        old = conn.devices.get(msg.device)
        conn.devices[msg.device] = gpu
        if old is not None and old not in conn.devices.values():  # the ordinal now names another GPU
            self._policy(old, "disconnect", conn)
        self._policy(gpu, "set_priority", conn, conn.priority)
        conn.send(encode(Attached(msg.device, 0, gpu.capacity)))
        log.info("attach pid=%d device=%d gpu=%s%s capacity=%d", conn.pid, msg.device, gpu.label,
                 f" ({gpu.uuid})" if gpu.index is not None else "", gpu.capacity)

    def _on_req_lock(self, conn: Conn, msg: LockRequest) -> None:
        self._client(conn)
        if gpu := self._device(conn, msg.device):
            log.debug("request pid=%d gpu=%s", conn.pid, gpu.label)
            self._policy(gpu, "request", conn)

    def _on_lock_released(self, conn: Conn, msg: Released) -> None:
        self._client(conn)
        if gpu := self._device(conn, msg.device):
            h = gpu.arbiter.holders.get(conn)
            if h is None:
                log.debug("pid=%d released gpu %s it does not hold; ignored", conn.pid, gpu.label)
                return
            reason = "idle" if msg.reason == ReleaseReason.IDLE else "dropped"
            report = SwitchReport(drain=msg.drain_us / 1e6, evict=msg.evict_us / 1e6,
                                  prefetch=msg.prefetch_us / 1e6)
            log.info("release pid=%d gpu=%s reason=%s held=%.2fs drain=%.1fms evict=%.1fms "
                     "prefetch=%.1fms", conn.pid, gpu.label, reason, self.now() - h.since,
                     report.drain * 1e3, report.evict * 1e3, report.prefetch * 1e3)
            self._policy(gpu, "release", conn, report=report)

    def _on_mem_update(self, conn: Conn, msg: MemUpdate) -> None:
        self._client(conn)
        if gpu := self._device(conn, msg.device):
            conn.memory[gpu.uuid] = (msg.managed_bytes, msg.other_bytes)
            self._policy(gpu, "set_footprint", conn, msg.managed_bytes + msg.other_bytes)

    def _on_ctl(self, conn: Conn, msg: dict) -> None:
        conn.ctl = conn.hello is None
        op = msg.get("op")
        entry = self._ops.get(op)
        try:
            if entry is None:
                raise CtlError(f"unknown op {op!r}")
            fn, admin = entry
            if admin and not self._is_admin(conn):
                raise CtlError(f"permission denied: uid {conn.uid} may not change scheduler settings "
                               "(root, the scheduler's own uid or --admin-group members only)")
            reply = {"ok": True, **(fn(self, msg) or {})}
        except CtlError as e:
            reply = {"ok": False, "error": str(e)}
        if op in ("set_tq", "set_mode", "set_gpu_memory", "set_priority"):
            log.info("ctl %s from pid=%d uid=%d: %s", op, conn.pid, conn.uid,
                     "ok" if reply["ok"] else reply["error"])
        try:
            frame = encode_json(MessageType.CTL_REPLY, reply)
        except ProtocolError:  # over MAX_PAYLOAD: a frame cannot carry it
            frame = encode_json(MessageType.CTL_REPLY, {
                "ok": False, "error": f"reply too large for one frame ({len(self.conns)} connections)"})
        conn.send(frame)

    _handlers = {
        MessageType.HELLO: _on_hello,
        MessageType.ATTACH: _on_attach,
        MessageType.REQ_LOCK: _on_req_lock,
        MessageType.LOCK_RELEASED: _on_lock_released,
        MessageType.MEM_UPDATE: _on_mem_update,
        MessageType.CTL_REQUEST: _on_ctl,
    }

    # -- control operations -----------------------------------------------------------------------
    def _is_admin(self, conn: Conn) -> bool:
        if conn.uid in (0, os.geteuid()):
            return True
        gid = self.config.admin_gid
        return gid is not None and gid in _groups(conn.pid, conn.gid)

    def _select(self, sel) -> list[Gpu]:
        if sel is None:
            return list(self.gpus.values())
        if isinstance(sel, bool) or not isinstance(sel, (int, str)):
            raise CtlError(f"invalid gpu {sel!r}: give an index or a UUID")
        gpus = [g for g in self.gpus.values() if g.matches(sel)]
        if not gpus and isinstance(sel, str) and not sel.isdigit():  # a unique UUID prefix
            gpus = [g for g in self.gpus.values() if g.uuid.lower().startswith(sel.lower())]
        if len(gpus) != 1:
            raise CtlError(f"no GPU matches {sel!r}" if not gpus else f"{sel!r} matches several GPUs")
        return gpus

    def _op_ping(self, msg: dict) -> dict:
        return {"version": __version__}

    def _op_set_tq(self, msg: dict) -> None:
        seconds = msg.get("seconds")
        if seconds == "auto":
            tq = None
        elif isinstance(seconds, bool) or not isinstance(seconds, int) or seconds <= 0:
            raise CtlError(f"invalid seconds {seconds!r}: a positive integer, or \"auto\" for the "
                           "dynamic quantum")
        elif seconds > TQ_MAX:
            raise CtlError(f"invalid seconds {seconds}: at most {TQ_MAX:.0f} (the quantum is sent to "
                           "clients in milliseconds as a 32-bit number)")
        else:
            tq = float(seconds)
        gpus = self._select(msg.get("gpu"))
        if msg.get("gpu") is None:
            self.default_tq = tq
        for gpu in gpus:
            self._policy(gpu, "set_tq", tq)

    def _op_set_mode(self, msg: dict) -> None:
        try:
            mode = Mode(msg.get("mode"))
        except ValueError:
            raise CtlError(f"invalid mode {msg.get('mode')!r}: auto, serial or off") from None
        gpus = self._select(msg.get("gpu"))
        if msg.get("gpu") is None:
            self.default_mode = mode
        for gpu in gpus:
            self._policy(gpu, "set_mode", mode)

    def _op_set_gpu_memory(self, msg: dict) -> None:
        size = msg.get("bytes")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise CtlError(f"invalid bytes {size!r}: a positive integer, or 0 to clear")
        if msg.get("gpu") is None:
            raise CtlError("set_gpu_memory needs a gpu")
        for gpu in self._select(msg["gpu"]):
            gpu.capacity_override = size
            self._capacity_changed(gpu)

    def _op_set_priority(self, msg: dict) -> dict:
        prio = msg.get("priority")
        if isinstance(prio, bool) or not isinstance(prio, int) or abs(prio) > PRIORITY_LIMIT:
            raise CtlError(f"invalid priority {prio!r}: an integer from {-PRIORITY_LIMIT} to "
                           f"{PRIORITY_LIMIT}")
        key = "pid" if "pid" in msg else "client_id" if "client_id" in msg else None
        value = msg.get(key)
        if key is None or isinstance(value, bool) or not isinstance(value, int):
            raise CtlError("set_priority needs a pid or a client_id (an integer)")
        targets = [c for c in self.conns
                   if c.hello is not None and (c.pid if key == "pid" else c.id) == value]
        if not targets:
            raise CtlError(f"no client with {key} {value}")
        for conn in targets:
            conn.priority = prio
            log.info("priority pid=%d client=%d priority=%d", conn.pid, conn.id, prio)
            for gpu in set(conn.devices.values()):
                self._policy(gpu, "set_priority", conn, prio)
        return {"clients": len(targets)}

    def _op_status(self, msg: dict) -> dict:
        now = self.now()
        gpus = sorted(self.gpus.values(), key=lambda g: (g.index is None, g.index or 0))
        clients = sorted((c for c in self.conns if c.hello is not None), key=lambda c: c.id)
        reply = {
            "scheduler": {"pid": os.getpid(), "uid": os.geteuid(), "version": __version__,
                          "socket": str(self.config.socket_path), "mode": self.default_mode.value,
                          "tq": self.default_tq if self.default_tq is not None else "auto"},
            "gpus": [self._gpu_status(g, now) for g in gpus],
            "clients": [self._client_status(c) for c in clients],
        }
        # A reply is one frame (MAX_PAYLOAD): with very many clients, shorten the command lines.
        if len(json.dumps(reply, separators=(",", ":"))) > MAX_PAYLOAD - 256:
            for c in reply["clients"]:
                c["command"] = c["command"][:COMMAND_SHORT]
        return reply

    def _gpu_status(self, g: Gpu, now: float) -> dict:
        arb = g.arbiter
        d = arb.describe(now)
        return {
            "index": g.index, "uuid": g.uuid, "name": g.name, "memory_total": g.memory_total,
            "capacity": g.capacity, "mode": arb.mode.value,
            "operation": d["operation"], "why": d["why"],
            "used": d["used"], "budget": d["budget"],
            "tq": arb.tq, "tq_source": d["tq_source"], "switch_cost": d["switch_cost"],
            "holders": [{"pid": c.pid, "client_id": c.id, "priority": c.priority,
                         "held_for": round(now - h.since, 3), "dropping": h.drop_sent is not None}
                        for c, h in arb.holders.items()],
            "queue": [c.pid for c in arb.queue],
            "blocked": [c.pid for c in d["blocked"]],
        }

    def _client_status(self, c: Conn) -> dict:
        states = {g.uuid: g.arbiter.state_of(c) for g in c.devices.values()}
        pod = self._pods(c.pid)
        hint = {"namespace": c.hello.pod_namespace, "name": c.hello.pod_name}
        return {
            "client_id": c.id, "pid": c.pid, "uid": c.uid, "command": c.command[:COMMAND_MAX],
            "priority": c.priority,
            "state": next((s for s in ("holding", "waiting") if s in states.values()), "idle"),
            "gpus": [{"device": dev, "uuid": g.uuid, "index": g.index, "state": states[g.uuid],
                      "managed_bytes": c.memory.get(g.uuid, (0, 0))[0],
                      "other_bytes": c.memory.get(g.uuid, (0, 0))[1]}
                     for dev, g in sorted(c.devices.items())],
            "pod": None if pod is None else {k: getattr(pod, k, None)
                                             for k in ("namespace", "name", "uid", "container_id")},
            "pod_hint": hint if (hint["name"] or hint["namespace"]) else None,
        }

    _ops = {
        "ping": (_op_ping, False),
        "status": (_op_status, False),
        "set_tq": (_op_set_tq, True),
        "set_mode": (_op_set_mode, True),
        "set_gpu_memory": (_op_set_gpu_memory, True),
        "set_priority": (_op_set_priority, True),
    }

    # -- lifecycle ---------------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve until SIGTERM/SIGINT; remove the socket on the way out."""
        self._loop = asyncio.get_running_loop()
        path = Path(self.config.socket_path)
        ensure_socket_dir(path)
        _remove_stale_socket(path)
        self._server = await asyncio.start_unix_server(self._serve_conn, path=str(path))
        os.chmod(path, 0o666)  # anyone may be scheduled; settings are checked per request
        ino = path.stat().st_ino
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._loop.add_signal_handler(sig, stop.set)
        log.info("nvshare-scheduler %s listening on %s (mode %s, tq %s, %d gpu(s) known)",
                 __version__, path, self.default_mode.value,
                 "dynamic" if self.default_tq is None else f"{self.default_tq:g}s", len(self.gpus))
        try:
            await stop.wait()
        finally:
            log.info("shutting down")
            self._server.close()
            for conn in list(self.conns):
                conn.writer.close()
            with contextlib.suppress(OSError):
                if path.stat().st_ino == ino:  # never remove a successor's socket
                    path.unlink()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _tq_text(arb: Arbiter) -> str:
    return f"{arb.tq:g}s" + ("" if arb.tq_explicit is not None else " (dynamic)")


class SocketInUse(RuntimeError):
    pass


def _remove_stale_socket(path: Path) -> None:
    """Remove a socket nobody answers on; refuse a live one or a file that is not a socket."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketInUse(f"{path} exists and is not a socket; not removing it")
    if socket_answers(path):
        raise SocketInUse(f"another scheduler is already listening on {path}")
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    log.info("removed stale socket %s", path)

