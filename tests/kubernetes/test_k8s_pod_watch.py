"""The node's pod watch (xpushare.kubernetes.pod_watch) against a fake API server
(tests/kubernetes/fake_apiserver.py) through the official kubernetes client: what it reports, in
order, and how it recovers. The parsing of the annotations is in test_k8s_pod_settings.py."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from xpushare.kubernetes.pod_settings import (COMPUTE_LIMIT, COMPUTE_SHARE, EVENT_REASON, MEMORY_LIMIT,
                                              PodKey, PodSettings, parse_annotations)
from xpushare.kubernetes.pod_watch import PodSettingsWatcher

from .fake_apiserver import FakeApiServer

GiB = 1024 ** 3
MiB = 1024 ** 2

kubernetes = pytest.importorskip("kubernetes", reason="the kubernetes client is not installed; "
                                 "pip install '.[test]'")

class Recorder:
    """Callbacks with their arrival times, and waiting on them."""

    def __init__(self):
        self.cond = threading.Condition()
        self.calls = []   # ("changed", key, settings, t) / ("removed", key, None, t)

    def changed(self, key, settings):
        with self.cond:
            self.calls.append(("changed", key, settings, time.monotonic()))
            self.cond.notify_all()

    def removed(self, key):
        with self.cond:
            self.calls.append(("removed", key, None, time.monotonic()))
            self.cond.notify_all()

    def wait_for(self, predicate, timeout=5.0):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                found = [c for c in self.calls if predicate(c)]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no such callback within {timeout}s; got {self.calls}")
                self.cond.wait(left)

    def names(self):
        with self.cond:
            return [(kind, key.name) for kind, key, _, _ in self.calls]


@pytest.fixture
def watch(api):
    started = []

    def _start(recorder, **kw):
        cfg = kubernetes.client.Configuration()
        cfg.host = api.url
        kw.setdefault("node_name", "node-a")
        w = PodSettingsWatcher(recorder.changed, recorder.removed,
                               api_client=kubernetes.client.ApiClient(cfg), **kw)
        started.append(w)
        return w.start()

    yield _start
    for w in started:
        w.stop()


def settings_of(**annotations):
    return parse_annotations(annotations)[0]


def test_initial_list_reports_annotated_pods_of_this_node_only(api, watch):
    a = api.add_pod("a", annotations={COMPUTE_LIMIT: "50"})
    api.add_pod("plain")                                                     # no GPU annotations
    api.add_pod("elsewhere", node="node-b", annotations={COMPUTE_LIMIT: "10"})
    rec = Recorder()
    w = watch(rec)
    call = rec.wait_for(lambda c: c[0] == "changed")
    assert call[1] == PodKey(a, "default", "a") and call[2].compute_limit == 50.0
    assert w.synced.wait(5)
    api.add_pod("later", annotations={MEMORY_LIMIT: "1GiB"})
    rec.wait_for(lambda c: c[1].name == "later")
    # the field selector went with the list and the watch; the other node's pod never came
    assert api.list_requests()[0]["fieldSelector"] == ["spec.nodeName=node-a"]
    assert api.watch_requests()[0]["fieldSelector"] == ["spec.nodeName=node-a"]
    assert api.watch_requests()[0]["resourceVersion"] == ["103"]
    assert rec.names() == [("changed", "a"), ("changed", "later")]


def test_added_modified_deleted_sequence_in_order_and_within_a_second(api, watch):
    rec = Recorder()
    w = watch(rec)
    assert w.synced.wait(5)
    assert api.wait(lambda: api.open_watches == 1)
    t0 = time.monotonic()
    uid = api.add_pod("p", namespace="ml", annotations={COMPUTE_SHARE: "2"})
    added = rec.wait_for(lambda c: c[0] == "changed")
    t1 = time.monotonic()
    api.modify(uid, {COMPUTE_SHARE: "2", COMPUTE_LIMIT: "25%", MEMORY_LIMIT: "512MiB"})
    modified = rec.wait_for(lambda c: c[0] == "changed" and c[2].compute_limit == 25.0)
    api.modify(uid, {COMPUTE_SHARE: "2", COMPUTE_LIMIT: "25%", MEMORY_LIMIT: "512MiB", "unrelated": "x"})
    api.delete(uid)
    removed = rec.wait_for(lambda c: c[0] == "removed")
    assert added[3] - t0 < 1.0 and modified[3] - t1 < 1.0               # applied within a second
    key = PodKey(uid, "ml", "p")
    assert [(c[0], c[1]) for c in rec.calls] == [("changed", key)] * 2 + [("removed", key)]
    assert added[2] == settings_of(**{COMPUTE_SHARE: "2"})
    assert modified[2] == PodSettings(25.0, 2.0, 512 * MiB,
                                      frozenset({"compute_limit", "compute_share", "memory_limit"}))
    assert removed[1] == key
    assert len(api.watch_requests()) == 1                                  # one watch carried it all


def test_bad_value_posts_one_event_keeps_the_previous_value_and_logs(api, watch, caplog):
    caplog.set_level(logging.WARNING, logger="nvshare.scheduler.pods")
    uid = api.add_pod("t", namespace="team", annotations={COMPUTE_LIMIT: "40"})
    rec = Recorder()
    watch(rec)
    rec.wait_for(lambda c: c[0] == "changed")
    api.modify(uid, {COMPUTE_LIMIT: "400"})                              # bad
    api.modify(uid, {COMPUTE_LIMIT: "400", MEMORY_LIMIT: "1GiB"})         # same bad value, another change
    second = rec.wait_for(lambda c: c[0] == "changed" and c[2].memory_limit == GiB)
    assert second[2].compute_limit == 40.0                                # the previous value stays
    api.modify(uid, {COMPUTE_LIMIT: "400", MEMORY_LIMIT: "lots"})         # a second, different bad value
    assert api.wait(lambda: len(api.events) >= 2)
    # Events go out in order: a duplicate for "400" would have come before the one for "lots"
    first, other = api.events[:2]
    assert first["_namespace"] == "team" and first["type"] == "Warning" and first["reason"] == EVENT_REASON
    assert first["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "team", "name": "t",
                                       "uid": uid, "resourceVersion": first["involvedObject"]["resourceVersion"]}
    assert COMPUTE_LIMIT in first["message"] and "'400'" in first["message"]
    assert "from 0.1 to 100" in first["message"] and "previous value" in first["message"]
    assert first["source"] == {"component": "nvshare-scheduler", "host": "node-a"}
    assert MEMORY_LIMIT in other["message"] and "'lots'" in other["message"]
    # fixed, then the same bad value again: reported again (a new mistake)
    api.modify(uid, {COMPUTE_LIMIT: "30", MEMORY_LIMIT: "1GiB"})
    rec.wait_for(lambda c: c[0] == "changed" and c[2].compute_limit == 30.0)
    api.modify(uid, {COMPUTE_LIMIT: "400", MEMORY_LIMIT: "1GiB"})
    assert api.wait(lambda: len(api.events) == 3)
    assert "'400'" in api.events[2]["message"]
    logged = [r.getMessage() for r in caplog.records if r.name == "nvshare.scheduler.pods"
              and r.levelno == logging.WARNING]
    assert sum("'400'" in m for m in logged) == 2 and any("'lots'" in m for m in logged)
    assert all("team/t" in m for m in logged)


@pytest.mark.parametrize("gone_as_http", [False, True], ids=["error-event", "http-410"])
def test_410_gone_relists(api, watch, gone_as_http):
    api.gone_as_http = gone_as_http
    keep = api.add_pod("keep", annotations={COMPUTE_LIMIT: "10"})
    lost = api.add_pod("lost", annotations={COMPUTE_LIMIT: "20"})
    rec = Recorder()
    w = watch(rec)
    assert w.synced.wait(5)
    assert api.wait(lambda: api.open_watches == 1)
    lists_before = len(api.list_requests())
    # while the watcher is cut off, the history it missed is compacted away
    with api.cond:
        api.watch_generation += 1          # drop the watch ...
        api.cond.notify_all()
        api.pods.pop(lost)                 # ... and change things without watch history
        api.pods[keep]["metadata"]["annotations"] = {COMPUTE_LIMIT: "15"}
        api.rv += 5
        api.compacted_rv = api.rv + 1
    rec.wait_for(lambda c: c[0] == "removed" and c[1].name == "lost")
    rec.wait_for(lambda c: c[0] == "changed" and c[1].name == "keep" and c[2].compute_limit == 15.0)
    assert len(api.list_requests()) == lists_before + 1
    assert w.resource_version == str(api.rv)
    # and it watches again from the new list's resourceVersion
    uid = api.add_pod("after", annotations={COMPUTE_SHARE: "4"})
    rec.wait_for(lambda c: c[1].uid == uid)


def test_dropped_connection_rewatches_from_the_last_resource_version(api, watch):
    uid = api.add_pod("d", annotations={COMPUTE_SHARE: "1"})
    rec = Recorder()
    w = watch(rec)
    assert api.wait(lambda: api.open_watches == 1)
    api.modify(uid, {COMPUTE_SHARE: "2"})
    rec.wait_for(lambda c: c[2] is not None and c[2].compute_share == 2.0)
    seen_rv = w.resource_version
    api.drop_watches()
    assert api.wait(lambda: len(api.watch_requests()) == 2)
    assert api.watch_requests()[1]["resourceVersion"] == [seen_rv]
    api.modify(uid, {COMPUTE_SHARE: "3"})
    rec.wait_for(lambda c: c[2] is not None and c[2].compute_share == 3.0)
    assert len(api.list_requests()) == 1                                    # no relist needed


def test_server_timeout_rewatches_at_once(api, watch):
    rec = Recorder()
    w = watch(rec, watch_timeout=1)
    assert w.synced.wait(5)
    assert api.wait(lambda: len(api.watch_requests()) >= 3, timeout=10)
    assert all(q["timeoutSeconds"] == ["1"] for q in api.watch_requests())
    assert all(q["allowWatchBookmarks"] == ["true"] for q in api.watch_requests())


def test_api_server_down_at_start_then_up(watch):
    """Backoff while nothing answers; the list happens once it does."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    server = FakeApiServer()
    rec = Recorder()
    cfg = kubernetes.client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    w = PodSettingsWatcher(rec.changed, rec.removed, node_name="node-a", backoff_initial=0.05,
                           api_client=kubernetes.client.ApiClient(cfg), connect_timeout=1).start()
    try:
        time.sleep(0.3)
        assert not w.synced.is_set()
        server.server.server_close()
        from http.server import ThreadingHTTPServer
        server.server = ThreadingHTTPServer(("127.0.0.1", port), server._handler_class())
        server.thread = threading.Thread(target=server.server.serve_forever, daemon=True)
        server.add_pod("x", annotations={COMPUTE_LIMIT: "5"})
        server.start()
        rec.wait_for(lambda c: c[1].name == "x", timeout=10)
    finally:
        w.stop()
        server.stop()


def test_callbacks_on_an_asyncio_loop(api):
    """With loop=, callbacks run on the loop's thread, in order."""
    uid = api.add_pod("async", annotations={COMPUTE_LIMIT: "60"})

    async def main():
        loop = asyncio.get_running_loop()
        got = []
        done = asyncio.Event()

        def changed(key, settings):
            got.append(("changed", key.name, threading.current_thread() is threading.main_thread()))

        def removed(key):
            got.append(("removed", key.name, threading.current_thread() is threading.main_thread()))
            done.set()

        cfg = kubernetes.client.Configuration()
        cfg.host = api.url
        w = PodSettingsWatcher(changed, removed, node_name="node-a", loop=loop,
                               api_client=kubernetes.client.ApiClient(cfg)).start()
        try:
            await asyncio.sleep(0)      # start() returned without waiting for the API server
            await loop.run_in_executor(None, lambda: api.wait(lambda: api.open_watches == 1))
            api.delete(uid)
            await asyncio.wait_for(done.wait(), 5)
        finally:
            await loop.run_in_executor(None, w.stop)
        return got

    assert asyncio.run(main()) == [("changed", "async", True), ("removed", "async", True)]


def test_stop_interrupts_an_open_watch(api, watch):
    rec = Recorder()
    w = watch(rec)
    assert api.wait(lambda: api.open_watches == 1)
    t0 = time.monotonic()
    w.stop()
    assert time.monotonic() - t0 < 2.0
    assert not w._thread.is_alive()


def test_importing_the_module_does_not_load_the_kubernetes_client():
    """The scheduler imports this module; the client (and its dependencies) load only on start()."""
    import subprocess
    import sys
    code = ("import sys; import xpushare.kubernetes.pod_settings, xpushare.kubernetes.pod_watch; "
            "sys.exit(1 if 'kubernetes' in sys.modules or 'urllib3' in sys.modules else 0)")
    import xpushare
    src = str(__import__("pathlib").Path(xpushare.__file__).parents[1])
    r = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": src}, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
