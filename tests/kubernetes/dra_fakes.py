"""Fakes for the DRA plugin tests: NVML, the API server's resource.k8s.io/v1 objects, and a kubelet
that finds the plugin the way the real one does (a socket in the registration directory: GetInfo,
pick the newest DRAPlugin service offered, NotifyRegistrationStatus) and then calls it."""

from __future__ import annotations

import copy
import glob
import json
import os
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from urllib.parse import parse_qs, urlparse

import grpc

from xpushare.kubernetes.proto import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from xpushare.kubernetes.proto import pluginregistration_pb2 as reg_pb
from xpushare.kubernetes.proto import pluginregistration_pb2_grpc as reg_grpc

from .fake_apiserver import kubeconfig_for

GIB = 1 << 30
DRIVER = "gpu.nvshare.com"
NODE = "node-a"
GPU_A = "GPU-11111111-2222-3333-4444-555555555555"
GPU_B = "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa"



# -- NVML ----------------------------------------------------------------------------------------

@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    memory: int = 80 * GIB
    cc: tuple = (9, 0)


class FakeNvml:
    """The pynvml functions inventory.discover() calls."""

    def __init__(self, *gpus: FakeGpu):
        self.gpus = list(gpus)

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.gpus[i]

    def nvmlDeviceGetUUID(self, h):
        return h.uuid

    def nvmlDeviceGetName(self, h):
        return h.name.encode()      # older pynvml returns bytes

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=h.memory, free=h.memory, used=0)

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return h.cc

    def nvmlDeviceGetMinorNumber(self, h):
        return self.gpus.index(h)


# -- the API server ------------------------------------------------------------------------------

PREFIX = "/apis/resource.k8s.io/v1"


class FakeResourceApi:
    """ResourceClaims (read) and ResourceSlices (list with field selectors, create, replace, delete)
    over HTTP, for the official client's CustomObjectsApi. `fail_next` answers that many requests
    with HTTP 500 (an API server that is briefly unwell)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.claims = {}          # (namespace, name) -> claim
        self.slices = {}          # name -> slice
        self.requests = []        # (method, path)
        self.fail_next = 0
        self.rv = 1
        self.version = "v1.35.0"  # what GET /version says (the plugin reads it at start)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def kubeconfig(self, directory) -> str:
        path = os.path.join(str(directory), "kubeconfig")
        with open(path, "w") as f:
            f.write(kubeconfig_for(self.url))
        return path

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def add_claim(self, claim: dict) -> None:
        with self.lock:
            self.claims[(claim["metadata"]["namespace"], claim["metadata"]["name"])] = copy.deepcopy(claim)

    def slice_devices(self, name=f"{NODE}-{DRIVER}"):
        with self.lock:
            s = self.slices.get(name)
            return None if s is None else [d["name"] for d in s["spec"]["devices"]]

    def _answer(self, method, path, query, body):
        with self.lock:
            self.requests.append((method, path))
            if self.fail_next > 0:
                self.fail_next -= 1
                return 500, _status(500, "InternalError", "injected failure")
            if path.rstrip("/") == "/version" and method == "GET":
                major, minor = self.version.lstrip("v").split(".")[:2]
                return 200, {"major": major, "minor": minor, "gitVersion": self.version, "gitCommit": "0" * 40,
                             "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24",
                             "compiler": "gc", "platform": "linux/amd64"}
            parts = path[len(PREFIX):].strip("/").split("/") if path.startswith(PREFIX) else []
            if len(parts) == 4 and parts[0] == "namespaces" and parts[2] == "resourceclaims" and method == "GET":
                claim = self.claims.get((parts[1], parts[3]))
                return (200, claim) if claim else (404, _status(404, "NotFound", f"{parts[3]} not found"))
            if parts[:1] != ["resourceslices"]:
                return 404, _status(404, "NotFound", path)
            name = parts[1] if len(parts) > 1 else None
            if method == "GET" and name is None:
                wanted = dict(kv.split("=", 1) for kv in (query.get("fieldSelector", [""])[0]).split(",") if kv)
                items = [s for s in self.slices.values()
                         if all(_field(s, k) == v for k, v in wanted.items())]
                return 200, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList",
                             "metadata": {"resourceVersion": str(self.rv)}, "items": copy.deepcopy(items)}
            if method == "POST" and name is None:
                if body["metadata"]["name"] in self.slices:
                    return 409, _status(409, "AlreadyExists", "exists")
                return 201, self._store(body)
            if method == "PUT" and name:
                if name not in self.slices:
                    return 404, _status(404, "NotFound", name)
                return 200, self._store(body)
            if method == "DELETE" and name:
                if self.slices.pop(name, None) is None:
                    return 404, _status(404, "NotFound", name)
                return 200, _status(200, "Success", "deleted")
            return 405, _status(405, "MethodNotAllowed", method)

    def _store(self, body):
        self.rv += 1
        body = copy.deepcopy(body)
        for device in body["spec"].get("devices") or []:     # as the API server returns quantities
            for cap in (device.get("capacity") or {}).values():
                cap["value"] = _canonical(cap["value"])
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.slices[body["metadata"]["name"]] = body
        return body

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _do(self):
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                code, obj = api._answer(self.command, url.path, parse_qs(url.query), body)
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _do

        return Handler


def _canonical(text: str) -> str:
    """A quantity in the API server's canonical form, for the binary sizes used here (8589934592 ->
    "8Gi")."""
    n = int(text)
    for unit, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def _status(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure" if code >= 300 else "Success",
            "code": code, "reason": reason, "message": message}


def _field(obj, dotted):
    for part in dotted.split("."):
        obj = (obj or {}).get(part)
    return obj


def claim(name="nb", uid="0b1e5a7c-0000-4000-8000-000000000001", namespace="default", results=(),
          config=(), pods=("pod-uid-1",)) -> dict:
    """A ResourceClaim as the API server returns it once allocated and reserved for pods."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}},
            "status": {"allocation": {"devices": {"results": list(results), "config": list(config)}},
                       "reservedFor": [{"resource": "pods", "name": f"p{i}", "uid": u}
                                       for i, u in enumerate(pods)]}}


def result(device="gpu-0", request="gpu", memory=None, compute=None, driver=DRIVER, pool=NODE) -> dict:
    r = {"request": request, "driver": driver, "pool": pool, "device": device}
    consumed = {k: v for k, v in (("memory", memory), ("compute", compute)) if v is not None}
    if consumed:
        r["consumedCapacity"] = consumed
        r["shareID"] = "5ba1e000-0000-4000-8000-00000000000a"
    return r


def gpu_config(**parameters) -> dict:
    return {"source": "FromClaim", "requests": [],
            "opaque": {"driver": DRIVER, "parameters": {"apiVersion": "gpu.nvshare.com/v1alpha1",
                                                        "kind": "GpuConfig", **parameters}}}


# -- the kubelet ---------------------------------------------------------------------------------

SERVICES = {"v1.DRAPlugin": (dra_v1_pb2, dra_v1_pb2_grpc), "v1beta1.DRAPlugin": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc)}


class FakeDraKubelet:
    """The kubelet's side: its plugin watcher and its DRA client."""

    def __init__(self, registry_dir: str, prefer=("v1.DRAPlugin", "v1beta1.DRAPlugin")):
        self.registry_dir = registry_dir
        self.prefer = prefer
        self.info = None
        self.pb = self.stub = None
        self._channels = []

    def register(self, timeout: float = 20.0):
        """Wait for a registration socket, then register the plugin behind it."""
        deadline = time.monotonic() + timeout
        while True:
            socks = glob.glob(os.path.join(self.registry_dir, "*.sock"))
            if socks:
                try:
                    return self._register(socks[0])
                except grpc.RpcError:
                    if time.monotonic() > deadline:
                        raise
            elif time.monotonic() > deadline:
                raise TimeoutError(f"no registration socket in {self.registry_dir}")
            time.sleep(0.05)

    def _register(self, sock: str):
        ch = grpc.insecure_channel(f"unix:{sock}")
        self._channels.append(ch)
        reg = reg_grpc.RegistrationStub(ch)
        info = reg.GetInfo(reg_pb.InfoRequest(), timeout=5)
        chosen = next((v for v in self.prefer if v in info.supported_versions), None)
        ok = info.type == "DRAPlugin" and chosen is not None
        reg.NotifyRegistrationStatus(reg_pb.RegistrationStatus(
            plugin_registered=ok, error="" if ok else "no supported DRAPlugin version"), timeout=5)
        assert ok, info
        self.info, self.version = info, chosen
        self.pb, grpc_mod = SERVICES[chosen]
        ep = grpc.insecure_channel(f"unix:{info.endpoint}")
        self._channels.append(ep)
        self.stub = grpc_mod.DRAPluginStub(ep)
        return info

    def prepare(self, *claims):
        req = self.pb.NodePrepareResourcesRequest(claims=[
            self.pb.Claim(namespace=c["metadata"]["namespace"], uid=c["metadata"]["uid"],
                          name=c["metadata"]["name"]) for c in claims])
        return self.stub.NodePrepareResources(req, timeout=10)

    def unprepare(self, *claims):
        req = self.pb.NodeUnprepareResourcesRequest(claims=[
            self.pb.Claim(namespace=c["metadata"]["namespace"], uid=c["metadata"]["uid"],
                          name=c["metadata"]["name"]) for c in claims])
        return self.stub.NodeUnprepareResources(req, timeout=10)

    def close(self):
        for ch in self._channels:
            ch.close()


# -- a node: the real plugin (in this process, on real sockets) with the fakes around it -----------

class DraNode:
    """nvshare-dra-plugin's main objects built from its own flags (dra.main.build), run in a thread,
    against the fake API server (through the official client and a kubeconfig) and a fake NVML."""

    def __init__(self, root: str, api: FakeResourceApi, nvml: FakeNvml, *flags: str):
        from xpushare.kubernetes.dra.api import KubeApi
        from xpushare.kubernetes.dra.cli import build_parser
        from xpushare.kubernetes.dra.inventory import Publishing, discover
        from xpushare.kubernetes.dra.main import build
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.registry = os.path.join(root, "reg")
        self.cdi_dir = os.path.join(root, "cdi")
        self.state_dir = os.path.join(root, "state")
        self.scheduler_socket = os.path.join(root, "s.sock")
        args = build_parser().parse_args([
            "--node-name", NODE, "--kubelet-plugins-dir", os.path.join(root, "plugins"),
            "--kubelet-registry-dir", self.registry, "--cdi-dir", self.cdi_dir, "--state-dir", self.state_dir,
            "--scheduler-socket", self.scheduler_socket, "--nvml-health", "off",
            "--watch-interval", "0.05", *flags])
        self.args = args
        gpus = discover(nvml)
        publishing = Publishing(args.sharing, args.slots, args.oversubscribe, dict(args.gpu_memory) or None)
        self.driver, self.plugin = build(args, gpus, publishing, KubeApi(api.kubeconfig(root)))
        self.thread = None

    def start(self, health_sources=()) -> "DraNode":
        self.thread = threading.Thread(target=self.plugin.run, args=(list(health_sources),), daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.thread is not None:
            self.plugin.request_stop()
            self.thread.join(10)
            self.thread = None

    def cdi_files(self):
        return sorted(os.listdir(self.cdi_dir)) if os.path.isdir(self.cdi_dir) else []

    def cdi_env(self, claim_uid: str) -> dict:
        from xpushare.kubernetes.dra import cdi
        with open(cdi.spec_path(self.cdi_dir, claim_uid)) as f:
            spec = json.load(f)
        return dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])


def prepared_claim_env(root: str, nvml, lib_dir: str, socket_dir: str, the_claim: dict) -> dict:
    """The environment of the CDI spec a plugin (DraNode under `root`, GPUs from `nvml`) writes for
    `the_claim`, prepared through the fake kubelet as on a node whose library is in lib_dir and
    whose scheduler socket is in socket_dir (host and container alike). All is stopped again."""
    api = FakeResourceApi()
    node = DraNode(root, api, nvml, "--host-lib-dir", lib_dir, "--container-lib-dir", lib_dir,
                   "--host-socket-dir", socket_dir, "--container-socket-dir", socket_dir).start()
    kubelet = FakeDraKubelet(node.registry)
    try:
        kubelet.register()
        api.add_claim(the_claim)
        uid = the_claim["metadata"]["uid"]
        assert kubelet.prepare(the_claim).claims[uid].error == ""
        return node.cdi_env(uid)
    finally:
        kubelet.close()
        node.stop()
        api.stop()
