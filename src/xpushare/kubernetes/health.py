"""GPU health for the device plugin: pluggable sources, combined per GPU.

A GPU is Healthy when every source says so. Sources:

* NvmlHealthMonitor: NVML critical XID events (and double-bit ECC errors) and lost GPUs. XIDs that
  an application causes by itself (13, 31, 43, 45, 68, 109 by default, the same set NVIDIA's plugin
  skips) are ignored. A GPU marked unhealthy is probed every `probe_interval` seconds; it is
  Healthy again once the probe succeeds (NVML reaches it and reads its memory) and no critical XID
  has arrived for `xid_recovery_s` seconds (0: an XID keeps it Unhealthy until the plugin restarts).
  A lost GPU (NVML_ERROR_GPU_IS_LOST, or its UUID gone) recovers on the first good probe.
* FileHealthSource: a JSON file, ``{"GPU-<uuid>": "Unhealthy"}`` or
  ``{"GPU-<uuid>": {"health": "Unhealthy", "reason": "maintenance"}}``; GPUs not named, or a
  missing file, are Healthy. It is read every `interval` seconds. Operators use it to drain a GPU by
  hand (``--health-file``); the tests use it to inject health changes into the real plugin process.
  Write it atomically (temp file + rename): a file that does not parse keeps the previous state.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Callable, Dict, Iterable, Optional, Tuple

from .backoff import Backoff

log = logging.getLogger(__name__)

DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})

# NVML constants (stable parts of the NVML ABI; pynvml exports the same names)
NVML_EVENT_TYPE_DOUBLE_BIT_ECC = 0x0000000000000002
NVML_EVENT_TYPE_XID_CRITICAL = 0x0000000000000008
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

OnChange = Callable[[str, bool, str], None]  # (uuid, healthy, reason)


class HealthBoard:
    """Per-GPU health from several named sources; reports effective changes to `on_change`."""

    def __init__(self, uuids: Iterable[str], on_change: OnChange):
        self._lock = threading.Lock()
        self._state: Dict[str, Dict[str, str]] = {u: {} for u in uuids}  # uuid -> {source: reason}
        self._on_change = on_change

    def set(self, source: str, uuid: str, healthy: bool, reason: str = "") -> None:
        with self._lock:
            bad = self._state.get(uuid)
            if bad is None:
                return  # not one of ours
            was_healthy = not bad
            if healthy:
                bad.pop(source, None)
            else:
                bad[source] = reason or source
            now_healthy = not bad
            summary = "; ".join(f"{s}: {r}" for s, r in sorted(bad.items()))
        if now_healthy != was_healthy:
            self._on_change(uuid, now_healthy, summary or f"{source}: recovered")

    def healthy(self, uuid: str) -> bool:
        with self._lock:
            return not self._state.get(uuid)


class HealthSource:
    """A thread that feeds a HealthBoard. Subclasses implement poll_once()."""

    name = "source"

    def __init__(self):
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.board: Optional[HealthBoard] = None

    def start(self, board: HealthBoard) -> None:
        self.board = board
        self._thread = threading.Thread(target=self._run, name=f"health-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        retry = Backoff(1.0, 60.0)
        while not self._stop.is_set():
            try:
                self.poll_once()
                retry.succeeded()
            except Exception as e:  # noqa: BLE001 - a health source must never kill the plugin
                delay = retry.failed()
                log.error("health source %s failed (%s); retrying in %.0fs", self.name, e, delay)
                self._stop.wait(delay)

    def poll_once(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class FileHealthSource(HealthSource):
    name = "file"

    def __init__(self, path: str, uuids: Iterable[str], interval: float = 0.5):
        super().__init__()
        self.path = path
        self.uuids = list(uuids)
        self.interval = interval
        self._last_text: Optional[str] = None
        self._warned = False

    def read(self) -> Optional[Dict[str, Tuple[bool, str]]]:
        """{uuid: (healthy, reason)} for the file's contents; None if it does not parse."""
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            text = ""
        except OSError as e:
            log.warning("health file %s: %s", self.path, e)
            return None
        if text == self._last_text:
            return {}
        self._last_text = text
        data = {}
        if text.strip():
            try:
                data = json.loads(text)
                if not isinstance(data, dict):
                    raise ValueError("top level must be an object")
            except ValueError as e:
                if not self._warned:
                    log.warning("health file %s does not parse (%s); keeping the previous state",
                                self.path, e)
                    self._warned = True
                self._last_text = None
                return None
        self._warned = False
        result = {}
        for uuid in self.uuids:
            entry = data.get(uuid, "Healthy")
            reason = "marked Unhealthy in health file"
            if isinstance(entry, dict):
                reason = str(entry.get("reason") or reason)
                entry = entry.get("health", "Healthy")
            result[uuid] = (str(entry).lower() != "unhealthy", reason)
        return result

    def poll_once(self) -> None:
        states = self.read()
        if states and self.board is not None:
            for uuid, (healthy, reason) in states.items():
                self.board.set(self.name, uuid, healthy, reason)
        self._stop.wait(self.interval)


def _nvml_code(exc: Exception) -> Optional[int]:
    return getattr(exc, "value", None)


class NvmlHealthMonitor(HealthSource):
    """NVML XID events and lost-GPU probes. `nvml` is the pynvml module (or a test double)."""

    name = "nvml"

    def __init__(self, uuids: Iterable[str], nvml=None, ignored_xids=DEFAULT_IGNORED_XIDS,
                 probe_interval: float = 10.0, xid_recovery_s: float = 300.0,
                 wait_ms: int = 1000, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        if nvml is None:
            import pynvml as nvml  # nvidia-ml-py
        self.nvml = nvml
        self.uuids = list(uuids)
        self.ignored_xids = frozenset(ignored_xids)
        self.probe_interval = probe_interval
        self.xid_recovery_s = xid_recovery_s
        self.wait_ms = wait_ms
        self.clock = clock
        self._event_set = None
        self._registered: set = set()
        self._last_xid: Dict[str, float] = {}
        self._unhealthy: Dict[str, str] = {}   # uuid -> "xid" | "lost"
        self._next_probe = 0.0

    # -- setup -----------------------------------------------------------------------------------
    def setup(self) -> None:
        self.nvml.nvmlInit()
        self._event_set = self.nvml.nvmlEventSetCreate()
        for uuid in self.uuids:
            self._register(uuid)

    def _register(self, uuid: str) -> bool:
        """Watch `uuid` for events; False (and marked lost) if NVML cannot reach it."""
        if uuid in self._registered:
            return True
        try:
            handle = self.nvml.nvmlDeviceGetHandleByUUID(uuid)
            try:
                supported = self.nvml.nvmlDeviceGetSupportedEventTypes(handle)
            except Exception:  # noqa: BLE001
                supported = NVML_EVENT_TYPE_XID_CRITICAL | NVML_EVENT_TYPE_DOUBLE_BIT_ECC
            mask = supported & (NVML_EVENT_TYPE_XID_CRITICAL | NVML_EVENT_TYPE_DOUBLE_BIT_ECC)
            if mask:
                self.nvml.nvmlDeviceRegisterEvents(handle, mask, self._event_set)
                self._registered.add(uuid)
            else:
                log.warning("GPU %s: NVML reports no XID event support; only probes watch it", uuid)
                self._registered.add(uuid)
        except Exception as e:  # noqa: BLE001
            code = _nvml_code(e)
            if code == NVML_ERROR_NOT_SUPPORTED:
                log.warning("GPU %s: XID events not supported; only probes watch it", uuid)
                self._registered.add(uuid)
            else:
                log.warning("GPU %s: cannot register NVML events (%s)", uuid, e)
                self._mark(uuid, "lost", f"NVML cannot reach it: {e}")
                return False
        return True

    # -- state -----------------------------------------------------------------------------------
    def _mark(self, uuid: str, kind: str, reason: str) -> None:
        if self._unhealthy.get(uuid) != "xid":  # an XID outranks "lost" until it has cleared
            self._unhealthy[uuid] = kind
        if self.board is not None:
            self.board.set(self.name, uuid, False, reason)

    def _clear(self, uuid: str) -> None:
        self._unhealthy.pop(uuid, None)
        if self.board is not None:
            self.board.set(self.name, uuid, True)

    # -- one step ----------------------------------------------------------------------------------
    def poll_once(self) -> None:
        if self._event_set is None:
            self.setup()
        self._wait_event()
        now = self.clock()
        if now >= self._next_probe:
            self._next_probe = now + self.probe_interval
            self.probe()

    def _wait_event(self) -> None:
        try:
            data = self.nvml.nvmlEventSetWait_v2(self._event_set, self.wait_ms)
        except Exception as e:  # noqa: BLE001
            code = _nvml_code(e)
            if code == NVML_ERROR_TIMEOUT:
                return
            if code == NVML_ERROR_GPU_IS_LOST:
                self._next_probe = 0.0  # find out which one now
                return
            log.warning("NVML event wait failed: %s", e)
            self._stop.wait(self.wait_ms / 1000.0)
            return
        etype = int(data.eventType)
        xid = int(data.eventData)
        if etype == NVML_EVENT_TYPE_XID_CRITICAL and xid in self.ignored_xids:
            log.info("ignoring application XID %d", xid)
            return
        uuids = self._event_uuids(data)
        what = f"XID {xid}" if etype == NVML_EVENT_TYPE_XID_CRITICAL else "double-bit ECC error"
        for uuid in uuids:
            log.warning("GPU %s: critical %s -> Unhealthy", uuid, what)
            self._last_xid[uuid] = self.clock()
            self._unhealthy[uuid] = "xid"
            if self.board is not None:
                self.board.set(self.name, uuid, False, f"critical {what}")

    def _event_uuids(self, data):
        try:
            uuid = self.nvml.nvmlDeviceGetUUID(data.device)
            if isinstance(uuid, bytes):
                uuid = uuid.decode()
            if uuid in self.uuids:
                return [uuid]
        except Exception:  # noqa: BLE001
            pass
        return list(self.uuids)  # cannot tell which: all of them, as NVIDIA's plugin does

    def probe(self) -> None:
        now = self.clock()
        for uuid in self.uuids:
            try:
                handle = self.nvml.nvmlDeviceGetHandleByUUID(uuid)
                self.nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception as e:  # noqa: BLE001
                code = _nvml_code(e)
                if code in (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_NOT_FOUND, NVML_ERROR_UNKNOWN) \
                        or code is None:
                    log.warning("GPU %s: lost (%s) -> Unhealthy", uuid, e)
                    self._mark(uuid, "lost", f"GPU lost: {e}")
                    self._registered.discard(uuid)
                continue
            kind = self._unhealthy.get(uuid)
            if kind is None:
                continue
            if kind == "xid":
                if self.xid_recovery_s <= 0:
                    continue
                if now - self._last_xid.get(uuid, now) < self.xid_recovery_s:
                    continue
            if not self._register(uuid):
                continue
            log.warning("GPU %s: recovered -> Healthy", uuid)
            self._clear(uuid)
