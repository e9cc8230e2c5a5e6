"""The kubelet's gRPC services, thin over driver.Driver:

* Registration (pluginregistration): on <plugins_registry>/<driver>-reg.sock. The kubelet's plugin
  watcher finds the socket, calls GetInfo (type "DRAPlugin", the driver name, the DRA endpoint and
  the services offered there), then NotifyRegistrationStatus.
* DRAPlugin, v1 and v1beta1 (the same messages in two proto packages) on the endpoint
  <plugins>/<driver>/dra.sock. Kubelets from 1.34 pick v1; 1.32 and 1.33 speak v1beta1.

A claim that cannot be prepared gets its own error in the response (the kubelet retries it and
reports it in the pod's events); only a request that is not understood at all fails the whole call.
"""

from __future__ import annotations

import logging

import grpc

from ..proto import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from ..proto import pluginregistration_pb2 as reg_pb
from ..proto import pluginregistration_pb2_grpc as reg_grpc
from .api import ApiError
from .claims import ClaimError

log = logging.getLogger("nvshare-dra-plugin")

PLUGIN_TYPE = "DRAPlugin"
# (registration name, messages, grpc module): the names the kubelet looks for in supported_versions
SERVICES = (("v1.DRAPlugin", dra_v1_pb2, dra_v1_pb2_grpc),
            ("v1beta1.DRAPlugin", dra_v1beta1_pb2, dra_v1beta1_pb2_grpc))
SUPPORTED_VERSIONS = [name for name, _, _ in SERVICES]


class RegistrationService(reg_grpc.RegistrationServicer):
    def __init__(self, driver_name: str, endpoint: str, on_status=None):
        self.driver_name = driver_name
        self.endpoint = endpoint
        self.on_status = on_status or (lambda ok, error: None)

    def GetInfo(self, request, context):
        return reg_pb.PluginInfo(type=PLUGIN_TYPE, name=self.driver_name, endpoint=self.endpoint,
                                 supported_versions=SUPPORTED_VERSIONS)

    def NotifyRegistrationStatus(self, request, context):
        if request.plugin_registered:
            log.info("registered with the kubelet as DRA driver %s", self.driver_name)
        else:
            log.error("the kubelet refused the registration: %s", request.error)
        self.on_status(request.plugin_registered, request.error)
        return reg_pb.RegistrationStatusResponse()


def _dra_servicer(pb, pb_grpc, driver):
    # v1's Device carries the allocation's share ID (kubelets from 1.35 read it); v1beta1's has none
    has_share_id = "share_id" in pb.Device.DESCRIPTOR.fields_by_name

    class DRAPluginService(pb_grpc.DRAPluginServicer):
        def NodePrepareResources(self, request, context):
            resp = pb.NodePrepareResourcesResponse()
            for claim in request.claims:
                ref = f"{claim.namespace}/{claim.name} ({claim.uid})"
                if not (claim.uid and claim.namespace and claim.name):
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                  f"claim {ref}: namespace, uid and name are required")
                entry = resp.claims[claim.uid]
                try:
                    for d in driver.prepare(claim.namespace, claim.uid, claim.name):
                        share = {"share_id": d.share_id} if d.share_id and has_share_id else {}
                        entry.devices.add(request_names=[d.request], pool_name=d.pool, device_name=d.device,
                                          cdi_device_ids=list(d.cdi_ids), **share)
                except (ClaimError, ApiError) as e:
                    log.error("prepare %s refused: %s", ref, e)
                    entry.error = f"{driver.driver_name}: {e}"
                except Exception as e:  # noqa: BLE001 - e.g. OSError writing the spec; retried
                    log.exception("prepare %s failed", ref)
                    entry.error = f"{driver.driver_name}: preparing failed on node {driver.node}: {e}"
            return resp

        def NodeUnprepareResources(self, request, context):
            resp = pb.NodeUnprepareResourcesResponse()
            for claim in request.claims:
                entry = resp.claims[claim.uid]
                try:
                    driver.unprepare(claim.uid)
                except ClaimError as e:
                    log.error("unprepare %r refused: %s", claim.uid, e)
                    entry.error = f"{driver.driver_name}: {e}"
                except Exception as e:  # noqa: BLE001 - reported per claim; the kubelet retries
                    log.exception("unprepare %s failed", claim.uid)
                    entry.error = f"{driver.driver_name}: {e}"
            return resp

    return DRAPluginService()


def add_dra_services(server: grpc.Server, driver) -> None:
    """Serve DRAPlugin in every API version on `server`."""
    for _, pb, pb_grpc in SERVICES:
        pb_grpc.add_DRAPluginServicer_to_server(_dra_servicer(pb, pb_grpc, driver), server)


def add_registration_service(server: grpc.Server, driver_name: str, endpoint: str, on_status=None) -> None:
    reg_grpc.add_RegistrationServicer_to_server(RegistrationService(driver_name, endpoint, on_status), server)
