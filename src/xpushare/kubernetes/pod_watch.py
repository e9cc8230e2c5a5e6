"""The pod watch of one node: PodSettingsWatcher lists and watches the pods of its node
(field selector spec.nodeName=<node>, the node from NODE_NAME, the downward API) with the official
``kubernetes`` client in a background thread, parses their GPU annotations (pod_settings) and calls
on_changed(PodKey, PodSettings) / on_removed(PodKey). Invalid values become Warning Events
(InvalidGpuAnnotation) on the pod. The client is imported when the watcher starts, so importing this
module stays light.

Wiring into the asyncio scheduler (the loop never waits on the API server):

    if enabled_from_env():   # NVSHARE_POD_ANNOTATIONS=on, with NODE_NAME (the chart sets both)
        watcher = PodSettingsWatcher(on_changed=set_pod, on_removed=drop_pod,
                                     loop=asyncio.get_running_loop())
        watcher.start()      # returns at once; it raises only for a missing client or in-cluster
                             # configuration (ImportError, kubernetes.config.ConfigException)
    ...
    watcher.stop(timeout=0)  # at shutdown: the daemon threads are not waited for

With ``loop`` given, every callback runs on that loop through loop.call_soon_threadsafe, in the
order the watcher saw the changes; without it, callbacks run in the watcher's thread.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from datetime import datetime, timezone
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from .backoff import Backoff
from .pod_settings import (ANNOTATIONS, EVENT_REASON, PodKey, PodSettings, Problem, enabled_from_env,
                           parse_annotations, pod_key)

__all__ = ["PodSettingsWatcher", "enabled_from_env"]

log = logging.getLogger("nvshare.scheduler.pods")


class _Gone(Exception):
    """The resourceVersion is too old (410 Gone): list again."""


class _Pod:
    """What the watcher keeps per pod."""

    __slots__ = ("key", "api_uid", "resource_version", "settings", "reported")

    def __init__(self, key: PodKey, api_uid: str):
        self.key = key
        self.api_uid = api_uid
        self.resource_version = ""
        self.settings = PodSettings()   # the last settings reported (or the baseline)
        self.reported = False           # on_changed was called for this pod


class PodSettingsWatcher:
    """Lists and watches the pods of one node and reports their GPU settings.

    on_changed(key, settings): a pod's settings differ from the last ones reported for it (a pod
    never reported counts as PodSettings(): pods without the annotations are not reported);
    on_removed(key): a reported pod was deleted or left the node.

    node_name: default $NODE_NAME. loop: an asyncio loop to deliver callbacks on (thread-safe,
    call_soon_threadsafe); None calls them in the watcher's thread. api_client: a
    kubernetes.client.ApiClient; default in-cluster configuration, or `kubeconfig` (a path, or
    "" for the default ~/.kube/config / $KUBECONFIG) for development.

    The watch restarts when the server ends it (every `watch_timeout` seconds), at once; after
    errors with backoff (backoff.py: `backoff_initial` doubling to `backoff_max`, less up to a
    random quarter; a watch that works starts it over); after 410 Gone it lists again. Changes are handled one
    watch line at a time, with no batching. Invalid values are reported once per (pod, annotation,
    value) as Events, posted from a second thread so that a slow API server never holds up a change.
    """

    def __init__(self, on_changed: Callable[[PodKey, PodSettings], None],
                 on_removed: Callable[[PodKey], None], *, node_name: Optional[str] = None,
                 loop=None, api_client=None, kubeconfig: Optional[str] = None,
                 component: str = "nvshare-scheduler", watch_timeout: int = 300,
                 backoff_initial: float = 0.2, backoff_max: float = 30.0,
                 connect_timeout: float = 10.0):
        node_name = node_name if node_name is not None else os.environ.get("NODE_NAME", "")
        if not node_name:
            raise ValueError("the node name is not known: set NODE_NAME (the chart sets it from "
                             "spec.nodeName through the downward API)")
        self.node_name = node_name
        self.field_selector = f"spec.nodeName={node_name}"
        self._on_changed = on_changed
        self._on_removed = on_removed
        self._loop = loop
        self._api_client = api_client
        self._kubeconfig = kubeconfig
        self.component = component
        self.watch_timeout = int(watch_timeout)
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.connect_timeout = connect_timeout
        self._api = None
        self._pods: Dict[str, _Pod] = {}           # by metadata.uid
        self._bad: Dict[Tuple[str, str], str] = {}  # (metadata.uid, annotation) -> value reported
        self.resource_version = ""
        self._stop = threading.Event()
        self._resp = None
        self._resp_lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._events: "queue.Queue" = queue.Queue(maxsize=256)
        self._event_thread: Optional[threading.Thread] = None
        self.synced = threading.Event()            # set after the first successful list

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> "PodSettingsWatcher":
        """Start the watcher's threads; returns at once (the API server is reached from them)."""
        if self._thread is not None:
            raise RuntimeError("already started")
        self._api = self._make_api()
        self._thread = threading.Thread(target=self._run, name="pod-settings-watch", daemon=True)
        self._event_thread = threading.Thread(target=self._post_events, name="pod-settings-events",
                                              daemon=True)
        self._event_thread.start()
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        """Stop watching: interrupts a watch in progress and joins the threads for at most
        `timeout` seconds each (0: not at all; a list in progress cannot be interrupted)."""
        self._stop.set()
        with self._resp_lock:
            resp = self._resp
        if resp is not None:
            _interrupt(resp)
        try:
            self._events.put_nowait(None)
        except queue.Full:
            pass
        for t in (self._thread, self._event_thread):
            if t is not None and t is not threading.current_thread() and timeout > 0:
                t.join(timeout)

    def _make_api(self):
        from kubernetes import client, config
        api_client = self._api_client
        if api_client is None:
            if self._kubeconfig is not None:
                api_client = config.new_client_from_config(config_file=self._kubeconfig or None)
            else:
                cfg = client.Configuration()
                config.load_incluster_config(client_configuration=cfg)
                api_client = client.ApiClient(cfg)
        return client.CoreV1Api(api_client)

    # -- the loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        retry = Backoff(self.backoff_initial, self.backoff_max, jitter=0.25)
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                    self.synced.set()
                if self._watch_once():
                    retry.succeeded()
                    continue                        # the server ended the watch: watch again now
                # ended at once with nothing: do not spin
            except _Gone:
                log.info("pod watch: resourceVersion %s is too old (410 Gone); listing the pods again",
                         self.resource_version)
                need_list = True
                retry.succeeded()
                continue
            except Exception as e:  # network, API or decoding errors: retry with backoff
                if self._stop.is_set():
                    break
                if _status(e) == 410:
                    need_list = True
                    retry.succeeded()
                    log.info("pod watch: 410 Gone; listing the pods again")
                    continue
                log.warning("pod watch on node %s: %s; retrying (attempt %d)", self.node_name,
                            _describe(e), retry.failures + 1)
            self._stop.wait(retry.failed())

    def _list(self) -> None:
        resp = self._api.list_pod_for_all_namespaces(
            field_selector=self.field_selector, _preload_content=False,
            _request_timeout=(self.connect_timeout, 60))
        try:
            body = json.loads(resp.data)
        finally:
            resp.release_conn()
        items = body.get("items") or []
        seen = set()
        for pod in items:
            uid = self._apply(pod)
            if uid:
                seen.add(uid)
        for uid in [u for u in self._pods if u not in seen]:
            self._forget(uid)
        self.resource_version = (body.get("metadata") or {}).get("resourceVersion") or ""
        log.info("pod watch: %d pods on node %s (resourceVersion %s)", len(items), self.node_name,
                 self.resource_version)

    def _watch_once(self) -> bool:
        """One watch request from self.resource_version. True when it was a healthy watch (it
        delivered events, or lasted a second or more) that the server or the network ended; False
        when it ended at once with nothing; raises when it failed before delivering anything."""
        started = time.monotonic()
        resp = self._api.list_pod_for_all_namespaces(
            field_selector=self.field_selector, watch=True, allow_watch_bookmarks=True,
            resource_version=self.resource_version, timeout_seconds=self.watch_timeout,
            _preload_content=False,
            _request_timeout=(self.connect_timeout, self.watch_timeout + 30))
        with self._resp_lock:             # stop() sets the flag, then looks for a response here
            if self._stop.is_set():
                _interrupt(resp)
                return True
            self._resp = resp
        got_any = False
        try:
            from kubernetes.watch.watch import iter_resp_lines
            for line in iter_resp_lines(resp):
                if self._stop.is_set():
                    return True
                if not line.strip():
                    continue
                self._handle_line(line)
                got_any = True
        except _Gone:
            raise
        except Exception:
            if self._stop.is_set() or got_any:
                log.debug("pod watch: connection ended after events; watching again", exc_info=True)
                return True
            raise
        finally:
            with self._resp_lock:
                self._resp = None
            try:
                resp.release_conn()
            except Exception:
                pass
        return got_any or time.monotonic() - started >= 1.0

    def _handle_line(self, line: str) -> None:
        event = json.loads(line)
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise _Gone()
            raise RuntimeError(f"watch error {code}: {obj.get('message') or obj.get('reason')}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return
        if kind in ("ADDED", "MODIFIED"):
            self._apply(obj)
        elif kind == "DELETED":
            uid = (obj.get("metadata") or {}).get("uid")
            if uid:
                self._forget(uid)
        else:
            log.debug("pod watch: ignoring event type %r", kind)
        if rv:
            self.resource_version = rv

    # -- state -------------------------------------------------------------------------------

    def _apply(self, pod: Mapping) -> Optional[str]:
        """Take in one pod object; returns its metadata.uid (None when it is not ours)."""
        meta = pod.get("metadata") or {}
        api_uid = meta.get("uid")
        node = (pod.get("spec") or {}).get("nodeName")
        if not api_uid:
            return None
        if node != self.node_name:          # the field selector keeps these away; never trust it
            if api_uid in self._pods:
                self._forget(api_uid)
            return None
        key = pod_key(pod)
        entry = self._pods.get(api_uid)
        if entry is None:
            entry = self._pods[api_uid] = _Pod(key, api_uid)
        entry.resource_version = meta.get("resourceVersion") or ""
        settings, problems = parse_annotations(meta.get("annotations"), entry.settings)
        self._report_problems(entry, meta.get("annotations") or {}, problems)
        if settings != entry.settings:
            entry.settings = settings
            entry.reported = True
            log.info("pod %s: GPU settings %s", key, settings)
            self._deliver(self._on_changed, key, settings)
        return api_uid

    def _forget(self, api_uid: str) -> None:
        entry = self._pods.pop(api_uid, None)
        for k in [k for k in self._bad if k[0] == api_uid]:
            del self._bad[k]
        if entry is not None and entry.reported:
            log.info("pod %s: gone from node %s", entry.key, self.node_name)
            self._deliver(self._on_removed, entry.key)

    def _deliver(self, fn, *args) -> None:
        if self._loop is None:
            try:
                fn(*args)
            except Exception:
                log.exception("pod settings callback %r failed", fn)
            return
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: the scheduler is shutting down
            self._stop.set()

    # -- invalid values ----------------------------------------------------------------------

    def _report_problems(self, entry: _Pod, annotations: Mapping, problems: List[Problem]) -> None:
        bad_now = {p.annotation: p for p in problems}
        for ann in ANNOTATIONS:                       # fixed or removed: a later bad value is new
            k = (entry.api_uid, ann)
            if ann not in bad_now and k in self._bad:
                del self._bad[k]
        for p in problems:
            k = (entry.api_uid, p.annotation)
            if self._bad.get(k) == p.value:
                continue                               # reported already
            self._bad[k] = p.value
            log.warning("pod %s: %s", entry.key, p.message)
            try:
                self._events.put_nowait(self._event_body(entry, p))
            except queue.Full:
                log.warning("pod %s: too many Events pending; not posting this one", entry.key)

    def _event_body(self, entry: _Pod, p: Problem) -> dict:
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        ns, name = entry.key.namespace, entry.key.name
        return {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": ns},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": name,
                               "uid": entry.api_uid, "resourceVersion": entry.resource_version},
            "type": "Warning", "reason": EVENT_REASON, "message": p.message,
            "source": {"component": self.component, "host": self.node_name},
            "reportingComponent": self.component, "reportingInstance": self.node_name,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }

    def _post_events(self) -> None:
        while True:
            body = self._events.get()
            if body is None or self._stop.is_set():
                return
            try:
                self._api.create_namespaced_event(body["metadata"]["namespace"], body,
                                                  _request_timeout=(self.connect_timeout, 30))
            except Exception as e:
                log.warning("could not post the %s Event for pod %s/%s: %s", EVENT_REASON,
                            body["metadata"]["namespace"], body["involvedObject"]["name"],
                            _describe(e))


def _status(e: Exception) -> Optional[int]:
    status = getattr(e, "status", None)
    return status if isinstance(status, int) else None


def _describe(e: Exception) -> str:
    status = _status(e)
    if status is not None:
        return f"HTTP {status} {getattr(e, 'reason', '') or ''}".strip()
    return f"{type(e).__name__}: {e}"


def _interrupt(resp) -> None:
    """Wake a thread blocked reading a streaming response (urllib3)."""
    for name in ("shutdown", "close"):
        fn = getattr(resp, name, None)
        if fn is not None:
            try:
                fn()
                return
            except Exception:
                continue

