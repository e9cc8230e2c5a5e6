"""The committed v1beta1 stubs: wire names and field numbers, import hygiene, runtime versions."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .k8s_helpers import PKG_PARENT, REPO

PROTO_DIR = Path(PKG_PARENT) / "xpushare" / "kubernetes" / "proto"

# The kubelet's v1beta1 API as documented: message -> {field: (number, repeated)}
API = {
    "DevicePluginOptions": {"pre_start_required": (1, False), "get_preferred_allocation_available": (2, False)},
    "RegisterRequest": {"version": (1, False), "endpoint": (2, False), "resource_name": (3, False),
                        "options": (4, False)},
    "Empty": {},
    "ListAndWatchResponse": {"devices": (1, True)},
    "TopologyInfo": {"nodes": (1, True)},
    "NUMANode": {"ID": (1, False)},
    "Device": {"ID": (1, False), "health": (2, False), "topology": (3, False)},
    "PreStartContainerRequest": {"devices_ids": (1, True)},
    "PreStartContainerResponse": {},
    "PreferredAllocationRequest": {"container_requests": (1, True)},
    "ContainerPreferredAllocationRequest": {"available_deviceIDs": (1, True), "must_include_deviceIDs": (2, True),
                                            "allocation_size": (3, False)},
    "PreferredAllocationResponse": {"container_responses": (1, True)},
    "ContainerPreferredAllocationResponse": {"deviceIDs": (1, True)},
    "AllocateRequest": {"container_requests": (1, True)},
    "ContainerAllocateRequest": {"devices_ids": (1, True)},
    "CDIDevice": {"name": (1, False)},
    "AllocateResponse": {"container_responses": (1, True)},
    "ContainerAllocateResponse": {"envs": (1, True), "mounts": (2, True), "devices": (3, True),
                                  "annotations": (4, True), "cdi_devices": (5, True)},
    "Mount": {"container_path": (1, False), "host_path": (2, False), "read_only": (3, False)},
    "DeviceSpec": {"container_path": (1, False), "host_path": (2, False), "permissions": (3, False)},
}
SERVICES = {
    "Registration": {"Register": ("RegisterRequest", "Empty", False)},
    "DevicePlugin": {
        "GetDevicePluginOptions": ("Empty", "DevicePluginOptions", False),
        "ListAndWatch": ("Empty", "ListAndWatchResponse", True),
        "GetPreferredAllocation": ("PreferredAllocationRequest", "PreferredAllocationResponse", False),
        "Allocate": ("AllocateRequest", "AllocateResponse", False),
        "PreStartContainer": ("PreStartContainerRequest", "PreStartContainerResponse", False),
    },
}


def test_messages_and_field_numbers():
    from xpushare.kubernetes.proto import deviceplugin_pb2 as pb
    fd = pb.DESCRIPTOR
    assert fd.package == "v1beta1"
    assert fd.name == "xpushare/kubernetes/proto/deviceplugin.proto"  # unique in the default pool
    assert set(fd.message_types_by_name) == set(API)
    for msg, fields in API.items():
        desc = fd.message_types_by_name[msg]
        got = {f.name: (f.number, _repeated(f)) for f in desc.fields}
        assert got == fields, msg
    env = fd.message_types_by_name["ContainerAllocateResponse"].fields_by_name["envs"].message_type
    assert env.GetOptions().map_entry


def _repeated(field) -> bool:
    is_rep = getattr(field, "is_repeated", None)  # protobuf >= 6 deprecates .label
    if is_rep is not None:
        return bool(is_rep() if callable(is_rep) else is_rep)
    return field.label == field.LABEL_REPEATED


def test_services_and_method_paths():
    from xpushare.kubernetes.proto import deviceplugin_pb2 as pb
    for svc, methods in SERVICES.items():
        desc = pb.DESCRIPTOR.services_by_name[svc]
        assert desc.full_name == f"v1beta1.{svc}"
        got = {m.name: (m.input_type.name, m.output_type.name, m.server_streaming) for m in desc.methods}
        assert got == methods


def test_stub_uses_relative_import_and_wire_paths():
    text = (PROTO_DIR / "deviceplugin_pb2_grpc.py").read_text()
    assert "from . import deviceplugin_pb2 as" in text
    assert "from xpushare" not in text
    for path in ["/v1beta1.Registration/Register", "/v1beta1.DevicePlugin/ListAndWatch",
                 "/v1beta1.DevicePlugin/Allocate", "/v1beta1.DevicePlugin/GetPreferredAllocation",
                 "/v1beta1.DevicePlugin/GetDevicePluginOptions", "/v1beta1.DevicePlugin/PreStartContainer"]:
        assert f"'{path}'" in text or f'"{path}"' in text, path


def test_stubs_import_cleanly_in_a_fresh_interpreter():
    """No protobuf/grpc version warnings with the installed runtimes (warnings are errors here)."""
    code = ("import google.protobuf, grpc\n"
            "from xpushare.kubernetes.proto import deviceplugin_pb2_grpc as g, deviceplugin_pb2 as pb\n"
            "print(google.protobuf.__version__, grpc.__version__)\n")
    env = dict(os.environ, PYTHONPATH=PKG_PARENT)
    r = subprocess.run([sys.executable, "-W", "error", "-c", code], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def _version(text: str):
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def _floor(pkg: str, extra: str) -> tuple:
    text = (REPO / "pyproject.toml").read_text()
    block = re.search(rf"^{extra}\s*=\s*\[(.*?)\]", text, re.S | re.M).group(1)
    m = re.search(rf'"{pkg}\s*>=\s*([0-9.]+)', block)
    assert m, f"{pkg} has no floor in the {extra} extra"
    return _version(m.group(1))


def test_gencode_matches_protobuf_floor():
    text = (PROTO_DIR / "deviceplugin_pb2.py").read_text()
    gencode = _version(re.search(r"# Protobuf Python Version: ([0-9.]+)", text).group(1))
    # protobuf's runtime check refuses gencode newer than the runtime: the floor must cover it
    for extra in ("kubernetes", "test"):
        assert _floor("protobuf", extra) >= gencode[:2], (extra, gencode)
    # and the gencode must be one the floor's major understands (5.x gencode, runtime 5.26+)
    assert gencode[0] == 5 and gencode >= (5, 26, 0)
    m = re.search(r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+)",
                  text)
    if m:  # newer generators embed the check; it must not demand more than the floor
        assert tuple(int(x) for x in m.groups())[:2] <= _floor("protobuf", "kubernetes")


def test_grpc_stub_matches_grpcio_floor():
    text = (PROTO_DIR / "deviceplugin_pb2_grpc.py").read_text()
    generated = _version(re.search(r"GRPC_GENERATED_VERSION = '([0-9.]+)'", text).group(1))
    for extra in ("kubernetes", "test"):
        floor = _floor("grpcio", extra)
        assert floor >= generated, (f"pyproject.toml allows grpcio {floor} in [{extra}] but the committed "
                                    f"stubs warn below {generated}")


@pytest.mark.timeout(300)
def test_committed_stubs_are_current():
    """tools/regen_proto.sh --check: regenerate with the pinned grpcio-tools and diff."""
    if os.environ.get("XPUSHARE_SKIP_REGEN_CHECK"):
        pytest.skip("XPUSHARE_SKIP_REGEN_CHECK is set")
    if shutil.which("bash") is None:
        pytest.skip("bash not available")
    r = subprocess.run(["bash", str(REPO / "tools" / "regen_proto.sh"), "--check"], capture_output=True,
                       text=True, timeout=280)
    if r.returncode != 0 and "stubs are up to date" not in r.stdout and "---" not in r.stdout:
        pytest.skip(f"could not install grpcio-tools to check (no package index?): {r.stderr[-400:]}")
    assert r.returncode == 0, r.stdout + r.stderr


# The kubelet's plugin registration and DRA plugin APIs: package -> service -> methods
DRA_MESSAGES = {
    "NodePrepareResourcesRequest": {"claims": (1, True)},
    "NodePrepareResourcesResponse": {"claims": (1, True)},
    "NodePrepareResourceResponse": {"devices": (1, True), "error": (2, False)},
    "Device": {"request_names": (1, True), "pool_name": (2, False), "device_name": (3, False),
               "cdi_device_ids": (4, True)},
    "NodeUnprepareResourcesRequest": {"claims": (1, True)},
    "NodeUnprepareResourcesResponse": {"claims": (1, True)},
    "NodeUnprepareResourceResponse": {"error": (1, False)},
    "Claim": {"namespace": (1, False), "uid": (2, False), "name": (3, False)},
}
# dra/v1's Device has the allocation's share ID since Kubernetes 1.35 (`optional string share_id = 5`)
DRA_V1_MESSAGES = dict(DRA_MESSAGES, Device=dict(DRA_MESSAGES["Device"], share_id=(5, False)))
REGISTRATION_MESSAGES = {
    "PluginInfo": {"type": (1, False), "name": (2, False), "endpoint": (3, False),
                   "supported_versions": (4, True)},
    "RegistrationStatus": {"plugin_registered": (1, False), "error": (2, False)},
    "RegistrationStatusResponse": {}, "InfoRequest": {},
}


@pytest.mark.parametrize("module,package,messages,service,methods", [
    ("dra_v1", "k8s.io.kubelet.pkg.apis.dra.v1", DRA_V1_MESSAGES, "DRAPlugin",
     {"NodePrepareResources", "NodeUnprepareResources"}),
    ("dra_v1beta1", "k8s.io.kubelet.pkg.apis.dra.v1beta1", DRA_MESSAGES, "DRAPlugin",
     {"NodePrepareResources", "NodeUnprepareResources"}),
    ("pluginregistration", "pluginregistration", REGISTRATION_MESSAGES, "Registration",
     {"GetInfo", "NotifyRegistrationStatus"}),
])
def test_dra_and_registration_wire_names(module, package, messages, service, methods):
    import importlib
    pb = importlib.import_module(f"xpushare.kubernetes.proto.{module}_pb2")
    fd = pb.DESCRIPTOR
    assert fd.package == package and fd.name == f"xpushare/kubernetes/proto/{module}.proto"
    top = {name for name in fd.message_types_by_name}
    assert top == set(messages)
    for msg, fields in messages.items():
        got = {f.name: (f.number, _repeated(f)) for f in fd.message_types_by_name[msg].fields}
        assert got == fields, msg
    svc = fd.services_by_name[service]
    assert svc.full_name == f"{package}.{service}"
    assert {m.name for m in svc.methods} == methods
    text = (PROTO_DIR / f"{module}_pb2_grpc.py").read_text()
    assert f"from . import {module}_pb2 as" in text and "from xpushare" not in text
    for m in methods:
        assert f"'/{package}.{service}/{m}'" in text


def test_the_v1_share_id_is_optional_as_the_kubelets():
    from xpushare.kubernetes.proto import dra_v1_pb2
    field = dra_v1_pb2.Device.DESCRIPTOR.fields_by_name["share_id"]
    assert field.has_presence and not dra_v1_pb2.Device().HasField("share_id")
