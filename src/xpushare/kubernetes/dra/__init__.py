"""nvshare-dra-plugin: the Kubernetes DRA (Dynamic Resource Allocation) kubelet plugin for the driver
``gpu.nvshare.com``. The cluster's scheduler places claims by GPU memory and compute; the node's
nvshare-scheduler and libnvshare.so hold each pod to what its claim was given.

The modules, in the order their dependencies point (each only uses those above it):

    inventory.py  the node's GPUs (NVML, or an injected fake) and the devices published for them
    claims.py     a ResourceClaim's allocation -> what each prepared claim gets (pure, checked)
    cdi.py        the CDI spec that injects it into containers (atomic files)
    state.py      prepared claims on disk (atomic checkpoint), so prepare/unprepare are idempotent
    api.py        the API server: read ResourceClaims, write this node's ResourceSlice
    driver.py     prepare / unprepare / publish: the steps above in order, and the scheduler told
    service.py    the kubelet's gRPC services (registration, DRAPlugin v1 and v1beta1), thin
    cli.py        flags;  main.py: the process (sockets, health, resync, --dry-run)
"""

DRIVER_NAME = "gpu.nvshare.com"
