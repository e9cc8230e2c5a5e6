"""A fake Kubernetes API server for the pod watch: enough of the REST protocol for the official
client's CoreV1Api.list_pod_for_all_namespaces (list, and watch as newline-delimited JSON in a
chunked response) and create_namespaced_event.

    GET  /api/v1/pods?fieldSelector=spec.nodeName=N              -> PodList with metadata.resourceVersion
    GET  /api/v1/pods?watch=true&resourceVersion=R&...           -> the events after R, then new ones
                                                                    as they happen, until timeoutSeconds
    POST /api/v1/namespaces/<ns>/events                          -> recorded in .events, 201

Mutations (add/modify/delete) bump a resourceVersion and wake the open watches. compact() makes
every resourceVersion so far too old (a new watch from one gets an ERROR event with code 410, or
an HTTP 410 with gone_as_http; open watches go on, as on a real server); drop_watches() cuts the open watch connections mid-stream.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


def kubeconfig_for(url: str) -> str:
    """A kubeconfig that points the official client at a fake API server, with no credentials."""
    return f"""apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster: {{server: "{url}"}}
users:
- name: test
  user: {{}}
contexts:
- name: fake
  context: {{cluster: fake, user: test}}
current-context: fake
"""


class FakeApiServer:
    def __init__(self):
        self.cond = threading.Condition()
        self.rv = 100
        self.pods = {}            # uid -> pod
        self.history = []         # (rv, type, pod)
        self.compacted_rv = 0     # a watch from a resourceVersion below this gets 410
        self.gone_as_http = False
        self.requests = []        # (method, path, query dict)
        self.events = []          # bodies POSTed to .../events
        self.watch_generation = 0  # drop_watches() bumps it
        self.open_watches = 0
        self.stopping = False
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> "FakeApiServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    # -- mutations -----------------------------------------------------------------------------

    def _record(self, kind, pod):
        self.rv += 1
        pod["metadata"]["resourceVersion"] = str(self.rv)
        self.history.append((self.rv, kind, json.loads(json.dumps(pod))))
        self.cond.notify_all()

    def add_pod(self, name, namespace="default", node="node-a", annotations=None, uid=None,
                extra_annotations=None):
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4()),
                            "annotations": dict(annotations or {}, **(extra_annotations or {}))},
               "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
               "status": {"phase": "Running"}}
        with self.cond:
            self.pods[pod["metadata"]["uid"]] = pod
            self._record("ADDED", pod)
        return pod["metadata"]["uid"]

    def modify(self, uid, annotations):
        with self.cond:
            pod = self.pods[uid]
            pod["metadata"]["annotations"] = dict(annotations)
            self._record("MODIFIED", pod)

    def delete(self, uid):
        with self.cond:
            pod = self.pods.pop(uid)
            self._record("DELETED", pod)

    def compact(self):
        """Every resourceVersion so far is too old to watch from."""
        with self.cond:
            self.compacted_rv = self.rv + 1
            self.cond.notify_all()

    def drop_watches(self):
        """Cut the open watch connections mid-stream (no end of the chunked body)."""
        with self.cond:
            self.watch_generation += 1
            self.cond.notify_all()

    def wait(self, predicate, timeout=5.0) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
            return True

    def watch_requests(self):
        with self.cond:
            return [q for m, p, q in self.requests if m == "GET" and q.get("watch") == ["true"]]

    def list_requests(self):
        with self.cond:
            return [q for m, p, q in self.requests if m == "GET" and q.get("watch") != ["true"]]

    # -- HTTP ----------------------------------------------------------------------------------

    def _handler_class(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _json(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                url = urlparse(self.path)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                with fake.cond:
                    fake.requests.append(("POST", url.path, {}))
                parts = url.path.strip("/").split("/")
                if len(parts) == 5 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "events":
                    body.setdefault("metadata", {})["name"] = body["metadata"].get("generateName", "e") + "x"
                    with fake.cond:
                        fake.events.append(dict(body, _namespace=parts[3]))
                        fake.cond.notify_all()
                    self._json(201, body)
                else:
                    self._json(404, {"kind": "Status", "code": 404})

            def do_GET(self):
                url = urlparse(self.path)
                query = parse_qs(url.query)
                with fake.cond:
                    fake.requests.append(("GET", url.path, query))
                if url.path != "/api/v1/pods":
                    self._json(404, {"kind": "Status", "code": 404})
                    return
                node = None
                for sel in query.get("fieldSelector", []):
                    if sel.startswith("spec.nodeName="):
                        node = sel.split("=", 1)[1]

                def matches(pod):
                    return node is None or pod["spec"].get("nodeName") == node

                if query.get("watch") != ["true"]:
                    with fake.cond:
                        items = [json.loads(json.dumps(p)) for p in fake.pods.values() if matches(p)]
                        body = {"apiVersion": "v1", "kind": "PodList",
                                "metadata": {"resourceVersion": str(fake.rv)}, "items": items}
                    self._json(200, body)
                    return
                self._watch(query, matches)

            def _chunk(self, obj):
                data = (json.dumps(obj) + "\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _watch(self, query, matches):
                since = int((query.get("resourceVersion") or ["0"])[0] or 0)
                timeout = float((query.get("timeoutSeconds") or ["300"])[0])
                with fake.cond:
                    gone = since < fake.compacted_rv
                    generation = fake.watch_generation
                if gone and fake.gone_as_http:
                    self._json(410, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                     "reason": "Expired", "code": 410,
                                     "message": f"too old resource version: {since}"})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                if gone:
                    self._chunk({"type": "ERROR", "object": {
                        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired",
                        "code": 410, "message": f"too old resource version: {since}"}})
                    self.wfile.write(b"0\r\n\r\n")
                    return
                deadline = time.monotonic() + timeout
                sent = since
                with fake.cond:
                    fake.open_watches += 1
                    fake.cond.notify_all()
                try:
                    while True:
                        with fake.cond:
                            while True:
                                pending = [h for h in fake.history if h[0] > sent]
                                if (pending or fake.stopping or fake.watch_generation != generation
                                        or time.monotonic() >= deadline):
                                    break
                                fake.cond.wait(0.05)
                            dropped = fake.watch_generation != generation
                            stopping = fake.stopping
                        if dropped or stopping:
                            self.close_connection = True
                            # The client may have gone first (a scheduler stopped before the
                            # server): nothing is left to cut then, and no traceback is due.
                            with contextlib.suppress(OSError):
                                self.connection.shutdown(socket.SHUT_RDWR)
                            return
                        for rv, kind, pod in pending:
                            if matches(pod):
                                self._chunk({"type": kind, "object": pod})
                            sent = rv
                        if time.monotonic() >= deadline:
                            self.wfile.write(b"0\r\n\r\n")
                            self.wfile.flush()
                            return
                finally:
                    with fake.cond:
                        fake.open_watches -= 1
                        fake.cond.notify_all()

        return Handler
