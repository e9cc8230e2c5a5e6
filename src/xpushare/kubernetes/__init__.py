"""Kubernetes integration: the nvshare.com/gpu device plugin and pod identity.

Keep this package's import light: the scheduler imports ``xpushare.kubernetes.podidentity``
(standard library only), and only the device plugin needs grpcio/protobuf (the ``kubernetes``
extra).

Modules: plugin (nvshare-device-plugin: gRPC service, lifecycle, CLI), devices (GPUs, device IDs,
placement policy), health (NVML and file health sources), libinstall (atomic install of
libnvshare.so), podidentity (pid -> pod), proto (kubelet device-plugin API v1beta1 stubs).
"""
