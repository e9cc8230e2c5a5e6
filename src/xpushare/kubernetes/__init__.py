"""Kubernetes integration: the nvshare.com/gpu device plugin and pod identity.

Keep this package's import light: the scheduler imports ``xpushare.kubernetes.podidentity`` and
``xpushare.kubernetes.pod_settings``/``pod_watch`` (standard library only at import; the pod watcher
imports the ``kubernetes`` client when it starts), and only the device plugin needs grpcio/protobuf (the
``kubernetes`` extra holds all three).

Modules: plugin (nvshare-device-plugin: gRPC service, lifecycle, CLI), devices (GPUs, device IDs,
placement policy), health (NVML and file health sources), libinstall (atomic install of
libnvshare.so), podidentity (pid -> pod), pod_settings (per-pod GPU settings from pod
annotations), pod_watch (the node's pod watch that reads them), proto (kubelet device-plugin API v1beta1 stubs).
"""
