"""Helpers for tests/kubernetes. A fake kubelet for the device-plugin tests: the Registration service on <dir>/kubelet.sock and a
client that calls the plugin the way the kubelet does (dial back after Register, hold a
ListAndWatch stream, call GetPreferredAllocation / Allocate)."""

from __future__ import annotations

import json
import os
import queue
import signal
import stat
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

import xpushare

from xpushare.kubernetes.proto import deviceplugin_pb2 as pb
from xpushare.kubernetes.proto import deviceplugin_pb2_grpc as pb_grpc


class _Registration(pb_grpc.RegistrationServicer):
    def __init__(self, kubelet: "FakeKubelet"):
        self.kubelet = kubelet

    def Register(self, request, context):
        copy = pb.RegisterRequest()
        copy.CopyFrom(request)
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version}")
        if self.kubelet.reject > 0:
            self.kubelet.reject -= 1
            self.kubelet.rejected.append(copy)
            context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet not ready (test)")
        self.kubelet.registrations.put(copy)
        # like the kubelet: answer first, then dial the plugin and start watching it
        threading.Thread(target=self.kubelet._watch, args=(copy,), daemon=True).start()
        return pb.Empty()


class FakeKubelet:
    def __init__(self, plugin_dir: str):
        self.dir = plugin_dir
        self.socket = os.path.join(plugin_dir, "kubelet.sock")
        self.registrations: "queue.Queue[pb.RegisterRequest]" = queue.Queue()
        self.updates: "queue.Queue[list]" = queue.Queue()   # device lists from ListAndWatch
        self.options = []                                     # GetDevicePluginOptions answers
        self.reject = 0                                       # refuse this many Register calls
        self.rejected = []
        self.server = None
        self._channels = []

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> "FakeKubelet":
        self.server = grpc.server(ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RegistrationServicer_to_server(_Registration(self), self.server)
        assert self.server.add_insecure_port(f"unix:{self.socket}") != 0
        self.server.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(0).wait(2)
            self.server = None
        for ch in self._channels:
            ch.close()
        self._channels.clear()
        try:
            os.unlink(self.socket)
        except FileNotFoundError:
            pass

    def restart(self) -> None:
        """What a kubelet restart does to the directory: every socket in it goes, then a new kubelet.sock."""
        self.stop()
        for name in os.listdir(self.dir):
            path = os.path.join(self.dir, name)
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)
        self.start()

    # -- the kubelet's side of a registered plugin -------------------------------------------------
    def channel(self, endpoint: str) -> grpc.Channel:
        ch = grpc.insecure_channel(f"unix:{os.path.join(self.dir, endpoint)}")
        self._channels.append(ch)
        return ch

    def stub(self, endpoint: str) -> pb_grpc.DevicePluginStub:
        return pb_grpc.DevicePluginStub(self.channel(endpoint))

    def _watch(self, req: pb.RegisterRequest) -> None:
        try:
            stub = self.stub(req.endpoint)
            self.options.append(stub.GetDevicePluginOptions(pb.Empty(), timeout=5))
            for resp in stub.ListAndWatch(pb.Empty()):
                self.updates.put(list(resp.devices))
        except grpc.RpcError:
            pass  # plugin or kubelet went away
        except ValueError:
            pass  # channel closed by stop()

    # -- helpers for tests -------------------------------------------------------------------------
    def wait_registration(self, timeout: float = 30.0) -> pb.RegisterRequest:
        return self.registrations.get(timeout=timeout)

    def wait_update(self, predicate=lambda devs: True, timeout: float = 20.0) -> list:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no matching ListAndWatch update")
            devs = self.updates.get(timeout=left)
            if predicate(devs):
                return devs


REPO = Path(__file__).resolve().parents[2]
# the directory holding the xpushare package under test (src/ or site-packages)
PKG_PARENT = str(Path(xpushare.__file__).resolve().parent.parent)

GPU_A = "GPU-11111111-2222-3333-4444-555555555555"
GPU_B = "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa"


class PluginProcess:
    def __init__(self, root: str, args: list[str]):
        self.root = root
        self.plugin_dir = os.path.join(root, "dp")
        self.lib_dir = os.path.join(root, "lib")
        self.health_file = os.path.join(root, "health.json")
        self.library = os.path.join(root, "libnvshare-build.so")
        self.log_path = os.path.join(root, "plugin.log")
        os.makedirs(self.plugin_dir, exist_ok=True)
        with open(self.library, "wb") as f:
            f.write(b"\x7fELF fake libnvshare for tests\n" * 64)
        env = dict(os.environ)
        env["PYTHONPATH"] = PKG_PARENT + os.pathsep + env.get("PYTHONPATH", "")
        env.pop("NVSHARE_VIRTUAL_DEVICES", None)
        cmd = [sys.executable, "-m", "xpushare.kubernetes.plugin",
               "--device-plugin-dir", self.plugin_dir,
               "--library", self.library, "--host-lib-dir", self.lib_dir,
               "--health-file", self.health_file, "--health-file-interval", "0.1",
               "--nvml-health", "off", "--watch-interval", "0.1", *args]
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def set_health(self, mapping: dict) -> None:
        tmp = self.health_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(mapping, f)
        os.replace(tmp, self.health_file)

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.log.close()
        return self.proc.returncode

