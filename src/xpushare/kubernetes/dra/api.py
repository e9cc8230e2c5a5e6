"""The API server, as far as the plugin needs it: read a ResourceClaim, and keep this node's
ResourceSlice (resource.k8s.io/v1) as the inventory says. KubeApi uses the official client's
generic object calls (plain dicts in the API's own field names); tests may pass any object with
the same methods, or point KubeApi at a fake server with a kubeconfig."""

from __future__ import annotations

import json
import re
from typing import List, Optional, Tuple

GROUP, VERSION = "resource.k8s.io", "v1"


def parse_version(git_version: str) -> Optional[Tuple[int, int]]:
    """"v1.34.2-eks-1234" -> (1, 34)."""
    m = re.match(r"v?(\d+)\.(\d+)", git_version)
    return (int(m.group(1)), int(m.group(2))) if m else None


class ApiError(Exception):
    """A call the API server refused or could not answer; `status` is the HTTP status (0: none)."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


class KubeApi:
    def __init__(self, kubeconfig: Optional[str] = None, timeout: float = 10.0):
        from kubernetes import client, config
        if kubeconfig:
            api_client = config.new_client_from_config(config_file=kubeconfig)
        else:
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
            api_client = client.ApiClient(cfg)
        self._objects = client.CustomObjectsApi(api_client)
        self._version = client.VersionApi(api_client)
        self._timeout = timeout

    def _call(self, what: str, fn, *args, **kw):
        from kubernetes.client.exceptions import ApiException
        try:
            return fn(*args, _request_timeout=self._timeout, **kw)
        except ApiException as e:
            reason = e.reason
            try:
                reason = json.loads(e.body or "{}").get("message") or reason
            except ValueError:
                pass
            raise ApiError(f"{what}: {e.status} {reason}", e.status) from None
        except Exception as e:  # noqa: BLE001 - connection refused, timeouts (urllib3)
            raise ApiError(f"{what}: {e}") from None

    def server_version(self) -> Optional[Tuple[int, int]]:
        """The API server's Kubernetes (major, minor), from its /version; None when it does not say."""
        info = self._call("get the API server's version", self._version.get_code)
        return parse_version(getattr(info, "git_version", "") or "")

    def get_claim(self, namespace: str, name: str) -> dict:
        return self._call(f"get ResourceClaim {namespace}/{name}",
                          self._objects.get_namespaced_custom_object, GROUP, VERSION, namespace,
                          "resourceclaims", name)

    def list_slices(self, driver: str, node: str) -> List[dict]:
        reply = self._call("list ResourceSlices", self._objects.list_cluster_custom_object, GROUP, VERSION,
                           "resourceslices", field_selector=f"spec.nodeName={node},spec.driver={driver}")
        return list(reply.get("items") or [])

    def create_slice(self, body: dict) -> dict:
        return self._call(f"create ResourceSlice {body['metadata']['name']}",
                          self._objects.create_cluster_custom_object, GROUP, VERSION, "resourceslices", body)

    def replace_slice(self, body: dict) -> dict:
        name = body["metadata"]["name"]
        return self._call(f"update ResourceSlice {name}", self._objects.replace_cluster_custom_object,
                          GROUP, VERSION, "resourceslices", name, body)

    def delete_slice(self, name: str) -> None:
        self._call(f"delete ResourceSlice {name}", self._objects.delete_cluster_custom_object,
                   GROUP, VERSION, "resourceslices", name)
